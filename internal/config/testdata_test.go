package config

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testEnv holds the environment the testdata configs reference.
var testEnv = map[string]string{
	"KEY_A1": "sk-test-a1", "KEY_A2": "sk-test-a2", "KEY_WITH_SPACE": "sk-test with-space",
	"SWARMGATE_REDIS_PASSWORD": "redis-pass-example", "OPENAI_KEY_1": "sk-example-openai-1",
	"OPENAI_KEY_2": "sk-example-openai-2", "RELAY_EU_KEY_1": "relay-eu-example-1",
	"RELAY_EU_KEY_2": "relay-eu-example-2", "RESEARCH_VIRTUAL_KEY": "vk-example-research",
	"SWARMGATE_SIGNING_KEY":  "signing-example",
	"SWARMGATE_ADMIN_TOKEN":  "admin-token-example",
	"SWARMGATE_FLEET_SECRET": "fleet-secret-example-0123456789", "SWARMGATE_FLEET_SECRET_PREVIOUS": "fleet-secret-example-previous",
}

func lookupTestEnv(k string) (string, bool) { v, ok := testEnv[k]; return v, ok }

func TestExampleConfig(t *testing.T) {
	c, err := Load("testdata/example.yaml", Options{LookupEnv: lookupTestEnv})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Backends) != 3 || len(c.Models) != 4 || len(c.Tenants) != 2 {
		t.Fatalf("counts %d %d %d", len(c.Backends), len(c.Models), len(c.Tenants))
	}
	relay, _ := c.Backend("relay-eu")
	if relay.ServerName() != "relay-eu.example.net" || !relay.TLSEnabled() || relay.Port() != 8443 ||
		relay.UpstreamPath("/v1/chat/completions") != "/openai/v1/chat/completions" || relay.Auth != AuthXAPIKey || !relay.IsIP() {
		t.Fatalf("relay-eu %+v", relay)
	}
	openai, _ := c.Backend("openai")
	if openai.Keys[2].Weight != 0 || openai.Keys[2].Secret.Value() != "sk-example-openai-3" || relay.Keys[0].Weight != 1 {
		t.Fatalf("weights/secret: %d %d", openai.Keys[2].Weight, relay.Keys[0].Weight)
	}
	if o, ok := c.LookupKey("vk-example-support"); !ok || o.Tenant.Name != "support-bot" {
		t.Fatal("file: virtual key not indexed")
	}
	if o, ok := c.LookupKey("vk-example-research"); !ok || o.Key.ID != "research-agents" {
		t.Fatal("env: virtual key not indexed")
	}
	if c.Retry.NumRetries != 4 || c.Breaker.Jitter != 0.25 || c.Breaker.ResetGrace.Duration != 500*time.Millisecond || c.Request.MaxBodyBytes != 16<<20 || c.Redis.Password.Value() != "redis-pass-example" {
		t.Fatalf("policies %+v %+v", c.Retry, c.Breaker)
	}
	if c.Admin.Token.Value() != "admin-token-example" || len(c.Admin.AllowedHosts) != 1 {
		t.Fatalf("admin %v %v", c.Admin.Token, c.Admin.AllowedHosts)
	}
	m, _ := c.Model("o4-mini")
	if m.Targets[0].Price.ReasoningPerMTok != 4.4 || m.Targets[1].Priority != 2 || !m.LongRunning {
		t.Fatalf("o4-mini %+v", m)
	}
	tn, _ := c.Tenant("support-bot")
	if tn.Budget.HardCap || len(tn.Budget.Alerts) != 3 {
		t.Fatalf("budget defaults %+v", tn.Budget)
	}
	// The control plane validates without credentials.
	if _, err := Load("testdata/example.yaml", Options{SkipSecrets: true, LookupEnv: func(string) (string, bool) { return "", false }}); err != nil {
		t.Fatalf("SkipSecrets: %v", err)
	}
}

// TestInvalidConfigs: each file's first line is
// "# want: LINE: PATH: MESSAGE"; Parse must report that error (among
// others), and every error must carry a line and a field path.
func TestInvalidConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil || len(files) < 18 {
		t.Fatalf("%d invalid configs (%v)", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(data), "\n")
			want, ok := strings.CutPrefix(first, "# want: ")
			if !ok {
				t.Fatalf("first line must be '# want: LINE: PATH: MESSAGE', got %q", first)
			}
			lineStr, rest, _ := strings.Cut(want, ": ")
			wantPath, wantMsg, _ := strings.Cut(rest, ": ")
			wantLine, err := strconv.Atoi(lineStr)
			if err != nil {
				t.Fatalf("bad want line %q", first)
			}
			_, err = Load(f, Options{LookupEnv: lookupTestEnv})
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("want Errors, got %T %v", err, err)
			}
			found := false
			for _, e := range errs {
				if e.Line <= 0 || e.Path == "" || e.File != f {
					t.Errorf("error without file, line or path: %q", e.Error())
				}
				if e.Line == wantLine && e.Path == wantPath && strings.Contains(e.Msg, wantMsg) {
					found = true
				}
				for _, secret := range testEnv {
					if strings.Contains(e.Error(), secret) {
						t.Errorf("secret value in error %q", e.Error())
					}
				}
			}
			if !found {
				t.Fatalf("want %s:%d: %s: %s...; got:\n%v", f, wantLine, wantPath, wantMsg, err)
			}
		})
	}
}

func TestIdentityKey(t *testing.T) {
	load := func(env map[string]string, mutate func(*Config)) []byte {
		t.Helper()
		c, err := Load("testdata/example.yaml", Options{LookupEnv: func(k string) (string, bool) {
			if v, ok := env[k]; ok {
				return v, true
			}
			return lookupTestEnv(k)
		}})
		if err != nil {
			t.Fatal(err)
		}
		if mutate != nil {
			mutate(c)
			if err := c.Prepare(Options{LookupEnv: lookupTestEnv, BaseDir: "testdata"}); err != nil {
				t.Fatal(err)
			}
		}
		return c.IdentityKey()
	}
	base := load(nil, nil)
	if len(base) == 0 || string(base) != string(load(nil, nil)) {
		t.Fatal("two loads of one config must agree on the identity key")
	}
	if string(base) == string(load(map[string]string{"SWARMGATE_SIGNING_KEY": "other"}, nil)) {
		t.Fatal("a different signing_key must give a different identity key")
	}
	unset := func(c *Config) { c.Identity.SigningKey = Secret{} }
	derived := load(nil, unset)
	if string(derived) == string(base) || len(derived) == 0 {
		t.Fatal("without signing_key the key is derived, not the configured one")
	}
	rotated := load(map[string]string{"OPENAI_KEY_1": "sk-rotated"}, unset)
	if string(rotated) == string(derived) {
		t.Fatal("the derived key must depend on the provider keys")
	}
}
