package gateway

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/telemetry"
	"github.com/swarmgate/swarmgate/internal/trust/trusttest"
)

// reloadYAML is a config that needs no Redis or upstream to parse; %s is
// added at the end (top-level sections).
const reloadYAML = `
backends:
  - {name: relay, base_url: "http://127.0.0.1:1/v1", keys: [{id: k1, secret: env:RELAY_KEY_1}]}
models:
  - {name: small, targets: [{backend: relay}]}
tenants:
  - {name: team, keys: [{id: t1, hash: "sha256:1111111111111111111111111111111111111111111111111111111111111111"}], models: ["*"]}
%s`

func parseReload(t *testing.T, extra string) *config.Config {
	t.Helper()
	c, err := config.Parse(fmt.Appendf(nil, reloadYAML, extra), "gateway.yaml", config.Options{LookupEnv: lookup})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// syncBuffer is a log sink the appliers may write from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) take() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.b.String()
	s.b.Reset()
	return out
}

// guarded is a Gateway as Run leaves it for reloads, without serving
// anything: start in force, a stand-in for the control plane's applier
// (registered first, as startControlPlane does) counting what reaches it,
// then guardReloads.
func guarded(t *testing.T, opts Options, start *config.Config) (g *Gateway, p *process, pushed *int, logs *syncBuffer) {
	t.Helper()
	logs = &syncBuffer{}
	opts.Initial, opts.Logger = start, slog.New(slog.NewTextHandler(logs, nil))
	g, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	g.cfg.Store(start)
	pushed = new(int)
	g.onConfigFirst(func(*config.Config) error { *pushed++; return nil })
	p = &process{cfg: start, sampler: telemetry.NewSampler(start.Telemetry.SampleRatio)}
	g.guardReloads(p)
	return g, p, pushed, logs
}

// TestReloadRefusesMovedListener: a reload that moves the ext_proc or
// rate-limit listener of a role this process runs is refused before the
// control plane sees it (it would point Envoy's cluster at a port nothing
// listens on); a process not running that role, or a replica taking the
// control plane's config, takes it.
func TestReloadRefusesMovedListener(t *testing.T) {
	start := parseReload(t, "listen: {extproc: 127.0.0.1:18001, ratelimit: 127.0.0.1:18002}\n")
	for _, tc := range []struct {
		name    string
		opts    Options
		listen  string
		refused string // "" when the reload is applied
	}{
		{"serve, extproc moved", Options{Roles: All}, "listen: {extproc: 127.0.0.1:18011, ratelimit: 127.0.0.1:18002}",
			"listen.extproc changed from 127.0.0.1:18001 to 127.0.0.1:18011: needs a restart"},
		{"serve, ratelimit moved", Options{Roles: All}, "listen: {extproc: 127.0.0.1:18001, ratelimit: 127.0.0.1:18012}",
			"listen.ratelimit changed from 127.0.0.1:18002 to 127.0.0.1:18012: needs a restart"},
		{"standalone ext_proc, extproc moved", Options{Roles: Roles{ExtProc: true, Admin: true}}, "listen: {extproc: 127.0.0.1:18011, ratelimit: 127.0.0.1:18002}",
			"listen.extproc changed"},
		{"standalone ext_proc, ratelimit moved", Options{Roles: Roles{ExtProc: true, Admin: true}}, "listen: {extproc: 127.0.0.1:18001, ratelimit: 127.0.0.1:18012}", ""},
		{"control plane alone, both moved", Options{Roles: Roles{ControlPlane: true, Admin: true}}, "listen: {extproc: 127.0.0.1:18011, ratelimit: 127.0.0.1:18012}", ""},
		{"replica from xDS, extproc moved", Options{Roles: Roles{ExtProc: true}, FromXDS: true}, "listen: {extproc: 127.0.0.1:18011, ratelimit: 127.0.0.1:18002}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _, pushed, _ := guarded(t, tc.opts, start)
			next := parseReload(t, tc.listen+"\n")
			err := g.apply(next)
			if tc.refused == "" {
				if err != nil || g.Config() != next || *pushed != 1 {
					t.Fatalf("apply: %v (in force: the new config %v, pushed %d); want it applied", err, g.Config() == next, *pushed)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.refused) {
				t.Fatalf("apply: %v, want %q", err, tc.refused)
			}
			if g.Config() != start || *pushed != 0 {
				t.Fatalf("refused config in force %v, reached the control plane %d times; want neither", g.Config() == next, *pushed)
			}
		})
	}
}

// TestReloadWarnsStartOnly: a reload changing a setting read only at start
// is applied with a warning naming it, once per change, and not for a role
// this process does not run; telemetry.sample_ratio follows the reload.
func TestReloadWarnsStartOnly(t *testing.T) {
	start := parseReload(t, "admission: {max_queue: 100}\n")
	g, p, _, logs := guarded(t, Options{Roles: All}, start)
	apply := func(extra string) string {
		t.Helper()
		if err := g.apply(parseReload(t, extra)); err != nil {
			t.Fatal(err)
		}
		return logs.take()
	}
	for _, step := range []struct {
		name, extra string
		want        []string // substrings of the warnings logged
		none        bool
	}{
		{name: "max_queue changed", extra: "admission: {max_queue: 200}\n",
			want: []string{"admission.max_queue changed by a reload: it applies at restart", "in_force=100", "reloaded=200"}},
		{name: "unchanged since the last reload", extra: "admission: {max_queue: 200}\n", none: true},
		{name: "back to the value in force", extra: "admission: {max_queue: 100}\n", none: true},
		{name: "several", extra: "admission: {max_queue: 100, session_idle: 9s, poll: 50ms, redis_timeout: 80ms, session_span: 3s, max_sessions: 7}\n" +
			"failure_modes: {admission_order: closed}\naccounting: {ledger_buffer: 5, spill_file: /tmp/spill}\ntelemetry: {otlp_endpoint: 127.0.0.1:4317, sample_ratio: 0.5}\n",
			want: []string{"admission.session_idle changed", "admission.poll changed", "admission.redis_timeout changed",
				"admission.session_span changed", "admission.max_sessions changed", "failure_modes.admission_order changed",
				"accounting.ledger_buffer changed", "accounting.spill_file changed", "telemetry.otlp_endpoint changed"}},
		{name: "sections are named, not logged", extra: "redis: {addrs: [10.0.0.1:6379], password: env:RELAY_KEY_2}\n",
			want: []string{"redis changed by a reload", "setting=redis"}},
	} {
		got := apply(step.extra)
		if step.none && got != "" {
			t.Errorf("%s: warned %q, want nothing", step.name, got)
		}
		for _, w := range step.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: the log lacks %q:\n%s", step.name, w, got)
			}
		}
		if strings.Contains(got, secrets["RELAY_KEY_2"]) {
			t.Errorf("%s: a secret value in the log:\n%s", step.name, got)
		}
		if step.name != "several" {
			continue
		}
		if strings.Contains(got, "sample_ratio") {
			t.Errorf("sample_ratio follows reloads, yet warned about:\n%s", got)
		}
		if d := p.sampler.Description(); !strings.Contains(d, "root:TraceIDRatioBased{0.5}") {
			t.Errorf("sampler after a reload to sample_ratio 0.5: %s", d)
		}
	}

	// A control plane alone runs no admission queue: nothing to warn.
	g, _, _, logs = guarded(t, Options{Roles: Roles{ControlPlane: true}}, start)
	if err := g.apply(parseReload(t, "admission: {max_queue: 200}\n")); err != nil {
		t.Fatal(err)
	}
	if got := logs.take(); got != "" {
		t.Errorf("control plane alone: warned %q", got)
	}
}

// TestRetireResolvesRelativePaths: the interim config of a reload that
// removes a backend is prepared with the config file's directory as its
// base, as the file was loaded: relative TLS paths resolve and the removal
// takes its two steps (it was applied at once, the interim refused for
// files looked up in the working directory).
func TestRetireResolvesRelativePaths(t *testing.T) {
	dir := t.TempDir()
	ca := trusttest.NewCA(t, dir, "mesh")
	leaf := ca.Issue(t, dir, "swarmgate", idSwarmgate)
	cert, err := filepath.Rel(dir, leaf.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := filepath.Rel(dir, leaf.KeyFile)
	render := func(backends ...string) []byte {
		var b strings.Builder
		fmt.Fprintf(&b, "security:\n  tls: {cert_file: %s, key_file: %s}\nbackends:\n", cert, key)
		for _, n := range backends {
			fmt.Fprintf(&b, "  - {name: %s, base_url: \"http://127.0.0.1:1/v1\", keys: [{id: k-%s, secret: env:RELAY_KEY_1}]}\n", n, n)
		}
		b.WriteString("models:\n  - {name: small, targets: [{backend: relay-a}]}\n")
		b.WriteString("tenants:\n  - {name: team, keys: [{id: t1, hash: \"sha256:1111111111111111111111111111111111111111111111111111111111111111\"}], models: [\"*\"]}\n")
		return []byte(b.String())
	}
	path := filepath.Join(dir, "gateway.yaml")
	load := func(backends ...string) *config.Config {
		t.Helper()
		if err := os.WriteFile(path, render(backends...), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(path, config.Options{LookupEnv: lookup})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	start := load("relay-a", "relay-b")
	logs := &syncBuffer{}
	g, err := New(Options{Roles: Roles{ExtProc: true}, ConfigPath: path, Load: config.Options{LookupEnv: lookup},
		Logger: slog.New(slog.NewTextHandler(logs, nil)), RetireAfter: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	defer g.stopRetiring()
	g.cfg.Store(start)
	var applied []*config.Config
	g.onConfig(func(c *config.Config) error { applied = append(applied, c); return nil })

	final := load("relay-a")
	if err := g.applyFromFile(final); err != nil {
		t.Fatal(err)
	}
	if len(applied) != 1 || applied[0] == final {
		t.Fatalf("the removal was applied at once, not in two steps; log:\n%s", logs.take())
	}
	if _, ok := applied[0].Backend("relay-b"); !ok {
		t.Fatal("the interim config forgot relay-b")
	}
	if got := applied[0].Security.Listener(config.ListenerExtProc).CertFile; got != leaf.CertFile {
		t.Errorf("interim config's certificate is %s, want %s (relative to the config file)", got, leaf.CertFile)
	}
}
