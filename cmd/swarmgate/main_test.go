package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/internal/gateway"
)

// gatewayYAML is a small valid config whose one key is an env: reference.
const gatewayYAML = `
backends:
  - name: openai
    base_url: https://api.openai.com/v1
    keys: [{id: openai-1, secret: env:SWARMGATE_TEST_OPENAI_KEY}]
models:
  - name: gpt-4o-mini
    targets: [{backend: openai}]
`

func writeConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(gatewayYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

type result struct {
	code           int
	stdout, stderr string
	opts           *gateway.Options // what a role command would have run
}

// execute runs one command line in process; role commands stop before
// serving and hand back their gateway options.
func execute(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	var r result
	c := &cli{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut,
		runGateway: func(_ context.Context, o gateway.Options) error { r.opts = &o; return nil }}
	r.code = c.run(context.Background(), args)
	r.stdout, r.stderr = out.String(), errOut.String()
	return r
}

func TestRoleFlagsInAnyOrder(t *testing.T) {
	cfg := writeConfig(t)
	t.Setenv("SWARMGATE_TEST_OPENAI_KEY", "sk-test")
	serve := gateway.Options{Roles: gateway.All, ConfigPath: cfg, NodeID: "n1"}
	replica := gateway.Options{Roles: gateway.Roles{ExtProc: true, Admin: true}, FromXDS: true, NodeID: "n1"}
	for _, tc := range []struct {
		name string
		args []string
		want gateway.Options
	}{
		{"serve flags", []string{"serve", "--config", cfg, "--node-id", "n1", "--log-format", "text"}, serve},
		{"serve flags reversed", []string{"serve", "--log-format=text", "--node-id=n1", "--config-file", cfg}, serve},
		{"serve one-dash long flags", []string{"serve", "-config", cfg, "-node-id=n1"}, serve},
		{"extproc --from-xds first", []string{"extproc", "--from-xds", "--config", cfg, "--node-id", "n1"}, replica},
		{"extproc --from-xds last", []string{"extproc", "--node-id", "n1", "--config", cfg, "--from-xds"}, replica},
		{"xds", []string{"xds", "--node-id", "n1", "--config", cfg},
			gateway.Options{Roles: gateway.Roles{ControlPlane: true, Admin: true}, ConfigPath: cfg, NodeID: "n1"}},
		{"ratelimit", []string{"ratelimit", "--config", cfg, "--node-id", "n1"},
			gateway.Options{Roles: gateway.Roles{RateLimit: true, Admin: true}, ConfigPath: cfg, NodeID: "n1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := execute(t, "", tc.args...)
			if r.code != exitOK || r.opts == nil {
				t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
			}
			got := *r.opts
			if got.Roles != tc.want.Roles || got.ConfigPath != tc.want.ConfigPath || got.NodeID != tc.want.NodeID || got.FromXDS != tc.want.FromXDS {
				t.Errorf("got roles %+v path %q node %q from-xds %v, want %+v %q %q %v", got.Roles, got.ConfigPath, got.NodeID, got.FromXDS,
					tc.want.Roles, tc.want.ConfigPath, tc.want.NodeID, tc.want.FromXDS)
			}
			// A replica starts from the file (it names the control plane) and
			// never watches it; the others watch it.
			if (got.Initial != nil) != tc.want.FromXDS {
				t.Errorf("initial config set: %v, want %v", got.Initial != nil, tc.want.FromXDS)
			}
			if got.Version != buildVersion() {
				t.Errorf("version %q, want %q", got.Version, buildVersion())
			}
		})
	}
}

func TestFlagsFromEnv(t *testing.T) {
	cfg, other := writeConfig(t), writeConfig(t)
	t.Setenv("SWARMGATE_TEST_OPENAI_KEY", "sk-test")
	for _, tc := range []struct {
		name           string
		env            map[string]string
		args           []string
		wantPath, node string
	}{
		{"variable when no flag", map[string]string{"SWARMGATE_NODE_ID": "from-env"}, []string{"serve", "--config", cfg}, cfg, "from-env"},
		{"flag wins", map[string]string{"SWARMGATE_NODE_ID": "from-env"}, []string{"serve", "--node-id", "n1", "--config", cfg}, cfg, "n1"},
		{"config file from env", map[string]string{"SWARMGATE_CONFIG_FILE": cfg}, []string{"serve", "--node-id", "n1"}, cfg, "n1"},
		{"--config wins over SWARMGATE_CONFIG_FILE", map[string]string{"SWARMGATE_CONFIG_FILE": other}, []string{"serve", "--config", cfg, "--node-id", "n1"}, cfg, "n1"},
		{"--config-file wins over SWARMGATE_CONFIG", map[string]string{"SWARMGATE_CONFIG": other}, []string{"serve", "--config-file", cfg, "--node-id", "n1"}, cfg, "n1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			r := execute(t, "", tc.args...)
			if r.code != exitOK || r.opts == nil {
				t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
			}
			if r.opts.ConfigPath != tc.wantPath || r.opts.NodeID != tc.node {
				t.Errorf("path %q node %q, want %q %q", r.opts.ConfigPath, r.opts.NodeID, tc.wantPath, tc.node)
			}
		})
	}
}

func TestCommands(t *testing.T) {
	cfg := writeConfig(t)
	for _, tc := range []struct {
		name       string
		stdin      string
		args       []string
		code       int
		stdout     string // how stdout starts
		stderrHead string // stderr's first line, when set
	}{
		{"validate flag first", "", []string{"validate", "--skip-secrets", cfg}, exitOK, cfg + ": ok (1 backends, 1 models, 0 tenants)\n", ""},
		{"validate flag last", "", []string{"validate", cfg, "--skip-secrets"}, exitOK, cfg + ": ok (1 backends, 1 models, 0 tenants)\n", ""},
		{"validate print", "", []string{"validate", "--skip-secrets", "--print", "listen.admin,envoy.listener_port", cfg}, exitOK, "127.0.0.1:19000\n10000\n", ""},
		{"validate print unknown", "", []string{"validate", "--skip-secrets", "--print", "tenants", cfg}, exitError, "",
			"swarmgate validate: --print tenants: not one of listen.xds, listen.extproc, listen.ratelimit, listen.admin, envoy.listener_address, envoy.listener_port"},
		{"validate unresolved secret", "", []string{"validate", cfg}, exitError, "", "swarmgate validate: " + cfg + ":5: backends[0].keys[0].secret: environment variable SWARMGATE_TEST_OPENAI_KEY is not set"},
		{"validate no file", "", []string{"validate", "--skip-secrets"}, exitUsage, "", "swarmgate validate: want one FILE, got 0 arguments"},
		{"validate two files", "", []string{"validate", cfg, cfg}, exitUsage, "", "swarmgate validate: want one FILE, got 2 arguments"},
		{"hash-key", "sk-swarmgate-demo\n", []string{"hash-key"}, exitOK, "sha256:", ""},
		{"hash-key empty", "", []string{"hash-key"}, exitError, "", "swarmgate hash-key: no key on stdin"},
		{"version command", "", []string{"version"}, exitOK, "swarmgate " + buildVersion() + "\n", ""},
		{"--version", "", []string{"--version"}, exitOK, "swarmgate " + buildVersion() + "\n", ""},
		{"bad flag", "", []string{"serve", "--bogus"}, exitUsage, "", "swarmgate serve: unknown flag: --bogus"},
		{"bad flag value", "", []string{"validate", "--skip-secrets=maybe", cfg}, exitUsage, "", `swarmgate validate: invalid argument "maybe" for "--skip-secrets" flag: strconv.ParseBool: parsing "maybe": invalid syntax`},
		{"bad mock flag", "", []string{"mock-upstream", "--bogus"}, exitUsage, "", "swarmgate mock-upstream: unknown flag: --bogus"},
		{"flag after --", "", []string{"validate", "--", "--skip-secrets"}, exitError, "", "swarmgate validate: reading config: open --skip-secrets: no such file or directory"},
		{"extra argument", "", []string{"serve", "gateway.yaml"}, exitUsage, "", `swarmgate serve: unknown command "gateway.yaml" for "swarmgate serve"`},
		{"no command", "", nil, exitUsage, "", "swarmgate: a command is required"},
		{"unknown command", "", []string{"frobnicate"}, exitUsage, "", `swarmgate: unknown command "frobnicate"`},
		{"misspelt command", "", []string{"servee"}, exitUsage, "", `swarmgate: unknown command "servee" (did you mean "serve"?)`},
		{"usage without tenant", "", []string{"usage", "--config", cfg}, exitUsage, "", "swarmgate usage: --tenant, --key or --label is required"},
		{"usage key and label", "", []string{"usage", "--config", cfg, "--key", "sk_1", "--label", "run=r1"}, exitUsage, "", "swarmgate usage: give one of --key and --label (counters are per key and per label)"},
		{"usage empty key", "", []string{"usage", "--config", cfg, "--key", ""}, exitUsage, "", "swarmgate usage: --key needs a key id"},
		{"usage bad label", "", []string{"usage", "--config", cfg, "--label", "run"}, exitUsage, "", `swarmgate usage: --label "run": want NAME=VALUE`},
		{"usage bad month", "", []string{"usage", "--config", cfg, "--tenant", "t", "--month", "2026-13"}, exitUsage, "", `swarmgate usage: --month "2026-13": want YYYY-MM`},
		{"migrate without source", "", []string{"migrate"}, exitUsage, "", "swarmgate migrate: name the config to convert: litellm"},
		{"migrate unknown source", "", []string{"migrate", "kong"}, exitUsage, "", `swarmgate migrate: unknown command "kong"`},
		{"migrate without --in", "", []string{"migrate", "litellm"}, exitUsage, "", "swarmgate migrate litellm: --in is required (a LiteLLM config file, or - for stdin)"},
		{"migrate from stdin", "model_list: [{model_name: m, litellm_params: {model: openai/m, api_key: os.environ/K}}]\n",
			[]string{"migrate", "litellm", "--in", "-"}, exitOK, "backends:", "note: no router_settings.redis_host: swarmgate needs Redis (shared limits, breakers, ledger); set redis.addrs"},
		{"migrate empty", "model_list: []\n", []string{"migrate", "litellm", "--in", "-"}, exitError, "", "swarmgate migrate litellm: -: litellm config: model_list is empty"},
		{"bad log level", "", []string{"serve", "--config", cfg, "--log-level", "loud"}, exitError, "", `swarmgate serve: --log-level: slog: level string "loud": unknown name`},
		{"help", "", []string{"help"}, exitOK, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := execute(t, tc.stdin, tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", r.code, tc.code, r.stdout, r.stderr)
			}
			if !strings.HasPrefix(r.stdout, tc.stdout) {
				t.Errorf("stdout %q, want %q", r.stdout, tc.stdout)
			}
			if head, _, _ := strings.Cut(r.stderr, "\n"); tc.stderrHead != "" && head != tc.stderrHead {
				t.Errorf("stderr starts %q, want %q", head, tc.stderrHead)
			}
			// A wrong command line shows the command's usage after the error.
			if usage := strings.Contains(r.stderr, "\nUsage:\n"); usage != (tc.code == exitUsage) {
				t.Errorf("usage on stderr: %v, want %v:\n%s", usage, tc.code == exitUsage, r.stderr)
			}
		})
	}
}

func TestHelpPerCommand(t *testing.T) {
	for _, tc := range []struct {
		path  []string
		usage string // the usage line
		flags []string
	}{
		{[]string{"serve"}, "swarmgate serve [flags]", []string{"--config-file", "--config ", "--log-level", "--log-format", "--node-id"}},
		{[]string{"xds"}, "swarmgate xds [flags]", []string{"--config-file", "--node-id"}},
		{[]string{"extproc"}, "swarmgate extproc [flags]", []string{"--config-file", "--from-xds"}},
		{[]string{"ratelimit"}, "swarmgate ratelimit [flags]", []string{"--config-file"}},
		{[]string{"validate"}, "swarmgate validate FILE [flags]", []string{"--skip-secrets"}},
		{[]string{"bootstrap"}, "swarmgate bootstrap [flags]", []string{"--envoy-admin", "--node-id"}},
		{[]string{"usage"}, "swarmgate usage --tenant T | --key ID | --label NAME=VALUE [flags]", []string{"--tenant", "--month", "--key", "--label", "run=nightly-42"}},
		{[]string{"keys"}, "swarmgate keys COMMAND [flags]", []string{"create", "list", "show", "update", "revoke", "SWARMGATE_ADMIN_TOKEN"}},
		{[]string{"keys", "create"}, "swarmgate keys create [--tenant T] [flags]", []string{"--admin-url", "--tenant", "--rpm", "--ttl", "--label", "--minter", "--budget"}},
		{[]string{"keys", "list"}, "swarmgate keys list [--tenant T] [--label name=value]... [flags]", []string{"--admin-url", "--tenant", "--label", "--json"}},
		{[]string{"keys", "show"}, "swarmgate keys show ID [flags]", []string{"--admin-url"}},
		{[]string{"keys", "update"}, "swarmgate keys update ID [flags]", []string{"--admin-url", "--rpm", "--no-expiry", "--clear-labels", "--no-budget"}},
		{[]string{"keys", "revoke"}, "swarmgate keys revoke ID [flags]", []string{"--admin-url"}},
		{[]string{"mock-upstream"}, "swarmgate mock-upstream [flags]", []string{"--listen", "--backend", "--tool-script", "-v, --v"}},
		{[]string{"hash-key"}, "swarmgate hash-key [flags]", nil},
		{[]string{"migrate", "litellm"}, "swarmgate migrate litellm --in FILE [flags]", []string{"--in", "--out"}},
		{[]string{"version"}, "swarmgate version [flags]", nil},
	} {
		t.Run(strings.Join(tc.path, " "), func(t *testing.T) {
			viaHelp := execute(t, "", append([]string{"help"}, tc.path...)...)
			viaFlag := execute(t, "", append(slices.Clone(tc.path), "--help")...)
			viaShort := execute(t, "", append(slices.Clone(tc.path), "-h")...)
			for _, r := range []result{viaHelp, viaFlag, viaShort} {
				if r.code != exitOK || r.opts != nil {
					t.Fatalf("exit %d (ran: %v), stderr:\n%s", r.code, r.opts != nil, r.stderr)
				}
			}
			if viaHelp.stdout != viaFlag.stdout || viaFlag.stdout != viaShort.stdout {
				t.Errorf("help differs:\n%s\n---\n%s\n---\n%s", viaHelp.stdout, viaFlag.stdout, viaShort.stdout)
			}
			if !strings.Contains(viaHelp.stdout, "Usage:\n  "+tc.usage+"\n") {
				t.Errorf("no usage line %q in:\n%s", tc.usage, viaHelp.stdout)
			}
			for _, f := range tc.flags {
				if !strings.Contains(viaHelp.stdout, f) {
					t.Errorf("flag %q missing from:\n%s", f, viaHelp.stdout)
				}
			}
		})
	}
}

func TestLongFlagsWithOneDash(t *testing.T) {
	root := (&cli{}).root()
	for _, tc := range []struct{ in, want []string }{
		{[]string{"serve", "-config", "f", "-log-level=debug"}, []string{"serve", "--config", "f", "--log-level=debug"}},
		{[]string{"serve", "--config", "f", "-h"}, []string{"serve", "--config", "f", "-h"}},
		{[]string{"serve", "-help"}, []string{"serve", "--help"}},
		{[]string{"validate", "-skip-secrets", "-", "f"}, []string{"validate", "--skip-secrets", "-", "f"}},
		{[]string{"validate", "--", "-skip-secrets"}, []string{"validate", "--", "-skip-secrets"}},
		{[]string{"validate", "-nosuch"}, []string{"validate", "-nosuch"}},
		{[]string{"mock-upstream", "-v", "-listen", "x"}, []string{"mock-upstream", "-v", "--listen", "x"}},
		{[]string{"frobnicate", "-config"}, []string{"frobnicate", "-config"}},
	} {
		if got := longFlagsWithOneDash(root, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestVersionOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"module version", debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{"devel build without VCS", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"VCS revision", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "373ae04c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f60"}, {Key: "vcs.modified", Value: "false"}}}, "dev-373ae04c1d2e"},
		{"dirty tree", debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "373ae04"}, {Key: "vcs.modified", Value: "true"}}}, "dev-373ae04-dirty"},
	} {
		if got := versionOf(&tc.info); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
