package watch

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swarmgate/swarmgate/internal/config"
)

func cfgYAML(model string) string {
	return `backends:
  - name: relay
    base_url: http://127.0.0.1:18101/v1
    keys: [{id: relay-1, secret: env:K}]
models:
  - {name: ` + model + `, targets: [{backend: relay}]}
`
}

type harness struct {
	t       *testing.T
	path    string
	applied chan string // first model name of each applied config
	reg     *prometheus.Registry
}

func start(t *testing.T, refuse func(*config.Config) error, retry ...time.Duration) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{t: t, path: filepath.Join(dir, "gateway.yaml"), applied: make(chan string, 16), reg: prometheus.NewRegistry()}
	if err := os.WriteFile(h.path, []byte(cfgYAML("m1")), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := Options{Load: config.Options{SkipSecrets: true}, Registerer: h.reg, Debounce: 20 * time.Millisecond}
	if len(retry) > 0 {
		opts.Retry = retry[0]
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, h.path, func(c *config.Config) error {
			if refuse != nil {
				if err := refuse(c); err != nil {
					return err
				}
			}
			h.applied <- c.Models[0].Name
			return nil
		}, opts)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	h.expect("m1")
	return h
}

func (h *harness) expect(model string) {
	h.t.Helper()
	select {
	case got := <-h.applied:
		if got != model {
			h.t.Fatalf("applied %q, want %q", got, model)
		}
	case <-time.After(10 * time.Second):
		h.t.Fatalf("config with %q not applied within 10s", model)
	}
}

// renameSave writes like vim or an IDE: a temporary file renamed over the
// original (the watched inode disappears).
func (h *harness) renameSave(content string) {
	h.t.Helper()
	tmp := h.path + ".swp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, h.path); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) rejected() float64 {
	mfs, _ := h.reg.Gather()
	for _, mf := range mfs {
		if strings.HasSuffix(mf.GetName(), "rejected_total") {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

func (h *harness) waitRejected(n float64) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.rejected() < n {
		if time.Now().After(deadline) {
			h.t.Fatalf("rejected count stayed %v, want %v", h.rejected(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWatch(t *testing.T) {
	h := start(t, nil)

	t.Run("in-place write", func(t *testing.T) {
		if err := os.WriteFile(h.path, []byte(cfgYAML("m2")), 0o600); err != nil {
			t.Fatal(err)
		}
		h.expect("m2")
	})
	t.Run("rename on save", func(t *testing.T) {
		h.renameSave(cfgYAML("m3"))
		h.expect("m3")
		h.renameSave(cfgYAML("m4")) // the new inode is watched too
		h.expect("m4")
	})
	t.Run("bad edit is rejected and counted", func(t *testing.T) {
		if n := h.rejected(); n != 0 {
			t.Fatalf("%v rejections before the bad edit", n)
		}
		h.renameSave(strings.Replace(cfgYAML("m5"), "backend: relay", "backend: nowhere", 1))
		h.waitRejected(1)
		select {
		case got := <-h.applied:
			t.Fatalf("invalid config applied: %s", got)
		default:
		}
		h.renameSave(cfgYAML("m6")) // a fixed edit goes through
		h.expect("m6")
	})
	if mfs, _ := h.reg.Gather(); len(mfs) != 2 {
		got := len(mfs)
		t.Errorf("%d metrics registered, want 2", got)
	}
}

func TestWatchApplyRefusal(t *testing.T) {
	refuse := errors.New("translation failed")
	h := start(t, func(c *config.Config) error {
		if c.Models[0].Name == "bad" {
			return refuse
		}
		return nil
	})
	h.renameSave(cfgYAML("bad"))
	h.waitRejected(1)
	h.renameSave(cfgYAML("good"))
	h.expect("good")
}

func TestWatchFirstLoadFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte("models: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Run(context.Background(), path, func(*config.Config) error { return nil }, Options{Load: config.Options{SkipSecrets: true}})
	if err == nil {
		t.Fatal("Run accepted an invalid first config")
	}
}

// TestWatchFirstLoadFailsWhileServing: a caller that already serves a
// config (the gateway loaded it at start) keeps it when the watcher's first
// load catches the file mid-save; the save's completed write is applied.
func TestWatchFirstLoadFailsWhileServing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, nil, 0o600); err != nil { // truncated by a save
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	applied := make(chan string, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, path, func(c *config.Config) error { applied <- c.Models[0].Name; return nil },
			Options{Load: config.Options{SkipSecrets: true}, Registerer: reg, Debounce: 20 * time.Millisecond, Serving: true})
	}()
	h := &harness{t: t, path: path, applied: applied, reg: reg}
	h.waitRejected(1)
	select {
	case err := <-done:
		t.Fatalf("Run ended on a first load caught mid-save: %v", err)
	default:
	}
	if err := os.WriteFile(path, []byte(cfgYAML("m1")), 0o600); err != nil {
		t.Fatal(err)
	}
	h.expect("m1")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// logRecorder keeps every log record.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}

func (r *logRecorder) count(level slog.Level, msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.recs {
		if rec.Level == level && rec.Message == msg {
			n++
		}
	}
	return n
}

// TestWatchRetriesUntilSecretsResolve: a config naming a secret that is not
// there yet is rejected once (one log line, one count) and tried again,
// quietly, without the file changing; it is applied once the secret
// appears.
func TestWatchRetriesUntilSecretsResolve(t *testing.T) {
	secretDir := t.TempDir() // not the watched directory: its changes are not seen
	var envMu sync.Mutex
	env := map[string]string{"K": "old-key"}
	for _, tc := range []struct {
		name    string
		secret  string
		provide func(t *testing.T)
	}{
		{"file secret written later", "file:" + filepath.Join(secretDir, "new-key"), func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(secretDir, "new-key"), []byte("s3cret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"env variable set later", "env:NEW_KEY", func(*testing.T) {
			envMu.Lock()
			env["NEW_KEY"] = "s3cret"
			envMu.Unlock()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &logRecorder{}
			h := &harness{t: t, path: filepath.Join(t.TempDir(), "gateway.yaml"), applied: make(chan string, 16), reg: prometheus.NewRegistry()}
			if err := os.WriteFile(h.path, []byte(cfgYAML("m1")), 0o600); err != nil {
				t.Fatal(err)
			}
			lookup := func(k string) (string, bool) {
				envMu.Lock()
				defer envMu.Unlock()
				v, ok := env[k]
				return v, ok
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- Run(ctx, h.path, func(c *config.Config) error { h.applied <- c.Models[0].Name; return nil },
					Options{Load: config.Options{LookupEnv: lookup}, Logger: slog.New(rec), Registerer: h.reg,
						Debounce: 20 * time.Millisecond, Retry: 40 * time.Millisecond})
			}()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			h.expect("m1")

			h.renameSave(strings.Replace(cfgYAML("m2"), "env:K", tc.secret, 1))
			h.waitRejected(1)
			for deadline := time.Now().Add(10 * time.Second); rec.count(slog.LevelDebug, "config still rejected") < 2; {
				if time.Now().After(deadline) {
					t.Fatal("the rejected config was not tried again")
				}
				time.Sleep(5 * time.Millisecond)
			}
			tc.provide(t)
			h.expect("m2")
			if n := h.rejected(); n != 1 {
				t.Errorf("rejections counted %v, want 1 (one file version)", n)
			}
			if n := rec.count(slog.LevelError, "config rejected; keeping the current config"); n != 1 {
				t.Errorf("rejection logged %d times, want once", n)
			}
		})
	}
}

// TestWatchRefusedNotRetried: a config apply refuses is the content's
// fault: it is not tried again until the file changes.
func TestWatchRefusedNotRetried(t *testing.T) {
	refusals := make(chan struct{}, 16)
	h := start(t, func(c *config.Config) error {
		if c.Models[0].Name == "bad" {
			refusals <- struct{}{}
			return errors.New("translation failed")
		}
		return nil
	}, 20*time.Millisecond)
	h.renameSave(cfgYAML("bad"))
	<-refusals
	time.Sleep(200 * time.Millisecond) // ten retry periods
	if n := len(refusals); n != 0 {
		t.Errorf("refused config applied %d more times", n)
	}
	h.renameSave(cfgYAML("good"))
	h.expect("good")
}

// TestWatchSecretFileRotated: a provider key read from a file: secret is
// rotated in place, the config file untouched: written over, or swapped
// the way Kubernetes updates a Secret volume (a new ..data directory, the
// key file a symlink through ..data). Each rotation reloads the config
// with the new key; a write that leaves the value as it was does not.
func TestWatchSecretFileRotated(t *testing.T) {
	secretDir := t.TempDir()
	swap := func(t *testing.T, version, key string) {
		t.Helper()
		d := filepath.Join(secretDir, "..v"+version)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "relay-1"), []byte(key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(secretDir, "..data_tmp")
		if err := os.Symlink("..v"+version, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(secretDir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	swap(t, "1", "key-1")
	if err := os.Symlink(filepath.Join("..data", "relay-1"), filepath.Join(secretDir, "relay-1")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(cfgYAML("m1"), "env:K", "file:"+filepath.Join(secretDir, "relay-1"), 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	keys := make(chan string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, path, func(c *config.Config) error { keys <- c.Backends[0].Keys[0].Secret.Value(); return nil },
			Options{Registerer: prometheus.NewRegistry(), Debounce: 20 * time.Millisecond})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-keys:
			if got != want {
				t.Fatalf("applied a config with key %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no config with key %q applied within 10s", want)
		}
	}
	expect("key-1")
	swap(t, "2", "key-2")
	expect("key-2")
	// Written over in place, through the symlink.
	if err := os.WriteFile(filepath.Join(secretDir, "relay-1"), []byte("key-3"), 0o600); err != nil {
		t.Fatal(err)
	}
	expect("key-3")
	// The same value again: nothing to apply.
	if err := os.WriteFile(filepath.Join(secretDir, "relay-1"), []byte("key-3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-keys:
		t.Fatalf("a write that changed no value applied the config again (key %q)", got)
	case <-time.After(300 * time.Millisecond):
	}
}
