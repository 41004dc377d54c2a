package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Distinctive secret values: none may appear in any printed form.
const (
	leakBackendEnv  = "LEAKCANARY-backend-env-7f3a"
	leakBackendFile = "LEAKCANARY-backend-file-91c2"
	leakRedis       = "LEAKCANARY-redis-pass-44d0"
	leakVirtualEnv  = "LEAKCANARY-virtual-env-0b5e"
	leakVirtualFile = "LEAKCANARY-virtual-file-c8a1"
	leakSpaced      = "LEAKCANARY spaced value"
	leakAdmin       = "LEAKCANARY-admin-token-3e17"
)

var leakValues = []string{leakBackendEnv, leakBackendFile, leakRedis, leakVirtualEnv, leakVirtualFile, leakSpaced, leakAdmin, "LEAKCANARY"}

const leakYAML = `
redis:
  addrs: [127.0.0.1:6379]
  password: env:LEAK_REDIS
admin:
  token: env:LEAK_ADMIN
backends:
  - name: relay-a
    base_url: https://relay.example.com/v1
    sni: relay.example.com
    auth: x-api-key
    keys:
      - {id: a1, secret: env:LEAK_BACKEND}
      - {id: a2, secret: file:backend.key}
models:
  - name: gpt-4o-mini
    targets:
      - backend: relay-a
tenants:
  - name: team
    keys:
      - {id: team-1, secret: env:LEAK_VIRTUAL}
      - {id: team-2, secret: file:virtual.key}
    models: ["*"]
    budget: {monthly: 10}
`

func leakEnv(k string) (string, bool) {
	v, ok := map[string]string{"LEAK_REDIS": leakRedis, "LEAK_BACKEND": leakBackendEnv, "LEAK_VIRTUAL": leakVirtualEnv, "LEAK_SPACED": leakSpaced, "LEAK_ADMIN": leakAdmin}[k]
	return v, ok
}

func leakDir(t *testing.T) string {
	dir := t.TempDir()
	for name, v := range map[string]string{"backend.key": leakBackendFile + "\n", "virtual.key": leakVirtualFile, "spaced.key": leakSpaced + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func assertNoLeak(t *testing.T, what, s string) {
	t.Helper()
	for _, v := range leakValues {
		if strings.Contains(s, v) {
			t.Errorf("%s contains a secret value: %s", what, s)
			return
		}
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	dir := leakDir(t)
	path := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(path, []byte(leakYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, Options{LookupEnv: leakEnv})
	if err != nil {
		t.Fatal(err)
	}
	// The secrets really were resolved (else this test proves nothing).
	b, _ := c.Backend("relay-a")
	if b.Keys[0].Secret.Value() != leakBackendEnv || b.Keys[1].Secret.Value() != leakBackendFile || c.Redis.Password.Value() != leakRedis || c.Admin.Token.Value() != leakAdmin {
		t.Fatal("secrets not resolved")
	}
	if _, ok := c.LookupKey(leakVirtualFile); !ok {
		t.Fatal("file virtual key not indexed")
	}
	owner, _ := c.LookupKey(leakVirtualEnv)

	values := map[string]any{
		"Config": c, "*Config": &c, "Backend": *b, "APIKey": b.Keys[0], "Secret": b.Keys[1].Secret, "*Secret": &b.Keys[1].Secret,
		"Redis": c.Redis, "Admin": c.Admin, "Tenant": c.Tenants[0], "VirtualKey": c.Tenants[0].Keys[0], "KeyOwner": owner,
		"Backends": c.Backends, "Keys": b.Keys, "Tenants": c.Tenants,
	}
	for name, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
			assertNoLeak(t, name+" "+verb, fmt.Sprintf(verb, v))
		}
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json %s: %v", name, err)
		}
		assertNoLeak(t, name+" json", string(j))
		y, err := yaml.Marshal(v)
		if err != nil {
			t.Fatalf("yaml %s: %v", name, err)
		}
		assertNoLeak(t, name+" yaml", string(y))
		for _, h := range []func(*bytes.Buffer) slog.Handler{
			func(w *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(w, nil) },
			func(w *bytes.Buffer) slog.Handler { return slog.NewTextHandler(w, nil) },
		} {
			var buf bytes.Buffer
			slog.New(h(&buf)).Info("config", "value", v, slog.Any("any", v))
			assertNoLeak(t, name+" slog", buf.String())
		}
	}
	red, err := Redacted(c)
	if err != nil {
		t.Fatal(err)
	}
	assertNoLeak(t, "Redacted", string(red))
	if strings.Contains(string(red), HashKey(leakVirtualEnv)) {
		t.Error("Redacted shows the hash derived from a virtual-key secret")
	}
	if !strings.Contains(string(red), "env:LEAK_BACKEND") || !strings.Contains(string(red), "file:virtual.key") ||
		!strings.Contains(string(red), "env:LEAK_ADMIN") {
		t.Errorf("Redacted lacks the references:\n%s", red)
	}
}

func TestSecretsNotInErrors(t *testing.T) {
	dir := leakDir(t)
	cases := map[string]string{
		"env with space":                    strings.Replace(leakYAML, "env:LEAK_BACKEND", "env:LEAK_SPACED", 1),
		"file with space":                   strings.Replace(leakYAML, "file:backend.key", "file:spaced.key", 1),
		"inline secret":                     strings.Replace(leakYAML, "env:LEAK_BACKEND", leakBackendEnv, 1),
		"inline with colon":                 strings.Replace(leakYAML, "env:LEAK_BACKEND", "sk:"+leakBackendEnv, 1),
		"secret as a number field":          strings.Replace(leakYAML, "budget: {monthly: 10}", "budget: {monthly: "+leakBackendEnv+"}", 1),
		"other error with secrets resolved": strings.Replace(leakYAML, "backend: relay-a", "backend: relay-x", 1),
		"url credentials":                   strings.Replace(leakYAML, "https://relay.example.com/v1", "https://u:"+leakRedis+"@relay.example.com/v1?token="+leakBackendFile, 1),
	}
	for name, y := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, "gw.yaml")
			if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path, Options{LookupEnv: leakEnv})
			if err == nil {
				t.Fatal("accepted")
			}
			if name != "secret as a number field" { // a value in a wrong field is the user's, echoed by yaml
				assertNoLeak(t, "error", err.Error())
				assertNoLeak(t, "error %+v", fmt.Sprintf("%+v %#v", err, err))
			}
		})
	}
}
