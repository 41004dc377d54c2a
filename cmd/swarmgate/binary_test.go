package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
)

// testVersion is what the test binary is stamped with, as make build
// stamps `git describe`.
const testVersion = "v0.0.0-cli-test"

var built struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// binary builds swarmgate once per test run, as the Makefile does.
func binary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "swarmgate-cli")
		if err != nil {
			built.err = err
			return
		}
		built.path = filepath.Join(dir, "swarmgate")
		cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion, "-o", built.path, ".")
		built.out, built.err = cmd.CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("go build: %v\n%s", built.err, built.out)
	}
	return built.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.path != "" {
		os.RemoveAll(filepath.Dir(built.path))
	}
	os.Exit(code)
}

// runBinary runs the built binary and returns its exit code and output.
func runBinary(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(binary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errOut.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), errOut.String()
	}
	t.Fatal(err)
	return 0, "", ""
}

func TestBinary(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		code       int
		stdout     string
		stderrHead string
	}{
		{[]string{"--version"}, exitOK, "swarmgate " + testVersion + "\n", ""},
		{[]string{"version"}, exitOK, "swarmgate " + testVersion + "\n", ""},
		{[]string{"serve", "--no-such-flag"}, exitUsage, "", "swarmgate serve: unknown flag: --no-such-flag"},
		{[]string{"extproc", "--from-xds=perhaps"}, exitUsage, "", `swarmgate extproc: invalid argument "perhaps" for "--from-xds" flag: strconv.ParseBool: parsing "perhaps": invalid syntax`},
		{[]string{"validate"}, exitUsage, "", "swarmgate validate: want one FILE, got 0 arguments"},
		{[]string{"validate", "no-such.yaml"}, exitError, "", "swarmgate validate: reading config: open no-such.yaml: no such file or directory"},
		{[]string{"help", "serve"}, exitOK, "run control plane, ext_proc, rate-limit service and admin in one process", ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runBinary(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			if !strings.HasPrefix(stdout, tc.stdout) {
				t.Errorf("stdout %q, want it to start %q", stdout, tc.stdout)
			}
			if head, _, _ := strings.Cut(stderr, "\n"); head != tc.stderrHead {
				t.Errorf("stderr starts %q, want %q", head, tc.stderrHead)
			}
		})
	}
}

// TestMigrateLiteLLM converts a LiteLLM config with the built binary and
// checks the result with the config loader, as `swarmgate validate` would.
func TestMigrateLiteLLM(t *testing.T) {
	out := filepath.Join(t.TempDir(), "gateway.yaml")
	code, stdout, stderr := runBinary(t, "migrate", "litellm", "--in", "testdata/litellm.yaml", "--out", out)
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout with --out: %q", stdout)
	}
	cfg, err := config.Load(out, config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatalf("converted config: %v", err)
	}
	if len(cfg.Backends) != 2 || len(cfg.Models) != 2 || len(cfg.Redis.Addrs) != 1 || cfg.Redis.Addrs[0] != "redis:6379" {
		t.Errorf("converted: %d backends, %d models, redis %v; want 2, 2, [redis:6379]", len(cfg.Backends), len(cfg.Models), cfg.Redis.Addrs)
	}
	if m, ok := cfg.Model("gpt-4o"); !ok || len(m.Targets) != 2 {
		t.Errorf("gpt-4o: want two targets (openai keys pooled, azure as priority 1), got %+v", m)
	}
	for _, want := range []string{"note: fallbacks not converted", "note: LiteLLM virtual keys, teams and budgets", "wrote " + out + " (2 notes to finish by hand)"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	// Without --out the config is the whole of stdout and the notes stay on
	// stderr, so the output can be redirected into a file.
	code, stdout, stderr = runBinary(t, "migrate", "litellm", "--in", "testdata/litellm.yaml")
	written, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if code != exitOK || stdout != string(written) {
		t.Errorf("exit %d; stdout differs from --out's file:\n%s", code, stdout)
	}
	if strings.Contains(stderr, "wrote") || !strings.Contains(stderr, "note: ") {
		t.Errorf("stderr:\n%s", stderr)
	}
}
