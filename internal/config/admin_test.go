package config

import (
	"strings"
	"testing"
)

func TestAdminToken(t *testing.T) {
	const y = `
admin:
  token: env:T_ADMIN
backends:
  - name: relay-a
    base_url: http://127.0.0.1:18101/v1
    keys: [{id: a1, secret: env:T_KEY}]
models:
  - {name: m, targets: [{backend: relay-a}]}
tenants:
  - {name: team, keys: [{id: k1, hash: "sha256:1111111111111111111111111111111111111111111111111111111111111111"}], models: ["*"]}
`
	env := map[string]string{"T_ADMIN": "admin-secret", "T_KEY": "sk-key"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	none := func(string) (string, bool) { return "", false }
	cases := []struct {
		name      string
		opts      Options
		wantToken string
		wantKey   string
		wantErr   string
	}{
		{"resolved with every secret", Options{LookupEnv: lookup}, "admin-secret", "sk-key", ""},
		{"skip secrets leaves it unresolved", Options{LookupEnv: lookup, SkipSecrets: true}, "", "", ""},
		{"control plane: admin token only", Options{LookupEnv: lookup, SkipSecrets: true, ResolveAdminToken: true}, "admin-secret", "", ""},
		{"missing admin token is an error", Options{LookupEnv: none, SkipSecrets: true, ResolveAdminToken: true}, "", "", "admin.token: environment variable T_ADMIN is not set"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse([]byte(y), "admin.yaml", c.opts)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Admin.Token.Value(); got != c.wantToken {
				t.Errorf("admin token resolved to %q, want %q", got, c.wantToken)
			}
			if got := cfg.Backends[0].Keys[0].Secret.Value(); got != c.wantKey {
				t.Errorf("upstream key resolved to %q, want %q", got, c.wantKey)
			}
		})
	}
}

// TestRedisPassword: a process that opens Redis resolves redis.password
// even when it goes without upstream keys (the control plane, the
// rate-limit service, `swarmgate usage`); before, it connected without one
// and every command answered NOAUTH.
func TestRedisPassword(t *testing.T) {
	const y = `
redis: {addrs: ["127.0.0.1:6379"], password: env:T_REDIS}
backends:
  - name: relay-a
    base_url: http://127.0.0.1:18101/v1
    keys: [{id: a1, secret: env:T_KEY}]
models:
  - {name: m, targets: [{backend: relay-a}]}
tenants:
  - {name: team, keys: [{id: k1, hash: "sha256:1111111111111111111111111111111111111111111111111111111111111111"}], models: ["*"]}
`
	env := map[string]string{"T_REDIS": "redis-pass", "T_KEY": "sk-key"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	none := func(string) (string, bool) { return "", false }
	for _, c := range []struct {
		name          string
		opts          Options
		want, wantKey string
		wantErr       string
	}{
		{"every secret", Options{LookupEnv: lookup}, "redis-pass", "sk-key", ""},
		{"validate --skip-secrets", Options{LookupEnv: lookup, SkipSecrets: true}, "", "", ""},
		{"a role without upstream keys", Options{LookupEnv: lookup, SkipSecrets: true, ResolveRedisPassword: true}, "redis-pass", "", ""},
		{"its password missing", Options{LookupEnv: none, SkipSecrets: true, ResolveRedisPassword: true}, "", "", "redis.password: environment variable T_REDIS is not set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse([]byte(y), "redis.yaml", c.opts)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Redis.Password.Value(); got != c.want {
				t.Errorf("redis password resolved to %q, want %q", got, c.want)
			}
			if got := cfg.Backends[0].Keys[0].Secret.Value(); got != c.wantKey {
				t.Errorf("upstream key resolved to %q, want %q", got, c.wantKey)
			}
		})
	}
}
