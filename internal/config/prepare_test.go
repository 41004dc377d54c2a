package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func programmaticConfig() *Config {
	c := Defaults()
	c.Source = "xds:gateway"
	c.Backends = []Backend{{
		Name: "relay-a", BaseURL: "https://relay.example.com/openai/v1", Auth: AuthAPIKey,
		Keys: []APIKey{
			{ID: "a1", Secret: SecretRef("env:KEY_A1"), Weight: 2},
			{ID: "a2", Secret: SecretFromValue("env:ELSEWHERE", "sk-already-resolved"), Weight: 0},
		},
	}}
	c.Models = []Model{{Name: "gpt-4o-mini", Targets: []Target{{Backend: "relay-a", Weight: 1}}}}
	c.Tenants = []Tenant{{Name: "team", Models: []string{"*"}, Keys: []VirtualKey{
		{ID: "t1", Secret: SecretRef("env:KEY_A2")},
		{ID: "t2", Hash: strings.ToUpper(HashKey("other"))[:7] + HashKey("other")[7:]},
	}, Budget: &Budget{Monthly: 5}}}
	return &c
}

func TestPrepareProgrammatic(t *testing.T) {
	c := programmaticConfig()
	if err := c.Prepare(Options{LookupEnv: lookupTestEnv}); err != nil {
		t.Fatal(err)
	}
	b, ok := c.Backend("relay-a")
	if !ok || b.Port() != 443 || b.UpstreamPath("/v1/embeddings") != "/openai/v1/embeddings" || b.APIStyle != "openai" || b.ConnectTimeout.D() != 5*time.Second {
		t.Fatalf("backend %+v", b)
	}
	if b.Keys[0].Secret.Value() != "sk-test-a1" || b.Keys[1].Secret.Value() != "sk-already-resolved" || b.Keys[1].Weight != 0 {
		t.Fatalf("keys %+v", b.Keys)
	}
	if o, ok := c.LookupKey("sk-test-a2"); !ok || o.Key.ID != "t1" {
		t.Fatal("secret virtual key not indexed")
	}
	if o, ok := c.LookupKey("other"); !ok || o.Key.ID != "t2" {
		t.Fatal("upper-case hash not normalised")
	}
	if c.Retry.NumRetries != 3 || len(c.Tenants[0].Budget.Alerts) != 3 || c.Envoy.XDSAddress != "127.0.0.1:18000" {
		t.Fatalf("defaults: %+v %+v", c.Retry, c.Envoy)
	}
	// Prepare is repeatable: the derived hash is recomputed, not "both set".
	if err := c.Prepare(Options{LookupEnv: lookupTestEnv}); err != nil {
		t.Fatalf("second Prepare: %v", err)
	}
	if _, ok := c.LookupKey("sk-test-a2"); !ok {
		t.Fatal("index lost after second Prepare")
	}
}

func TestPrepareErrorsHavePaths(t *testing.T) {
	c := programmaticConfig()
	c.Models[0].Targets[0].Backend = "nope"
	c.Backends[0].Keys[0].Weight = 0
	err := c.Prepare(Options{LookupEnv: func(string) (string, bool) { return "", false }})
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("want Errors, got %v", err)
	}
	want := map[string]bool{"models[0].targets[0].backend": false, "backends[0].keys": false, "backends[0].keys[0].secret": false, "tenants[0].keys[0].secret": false}
	for _, e := range errs {
		if e.File != "xds:gateway" {
			t.Errorf("file %q", e.File)
		}
		if _, ok := want[e.Path]; ok {
			want[e.Path] = true
		}
	}
	for p, seen := range want {
		if !seen {
			t.Errorf("no error for %s in:\n%v", p, err)
		}
	}
}

func TestPrepareSkipSecrets(t *testing.T) {
	c := programmaticConfig()
	c.Backends[0].Keys[0].Secret = SecretRef("sk-inline-oops")
	err := c.Prepare(Options{SkipSecrets: true})
	if err == nil || !strings.Contains(err.Error(), "backends[0].keys[0].secret: must be a reference") || strings.Contains(err.Error(), "sk-inline-oops") {
		t.Fatalf("SkipSecrets must still check the form: %v", err)
	}
	c.Backends[0].Keys[0].Secret = SecretRef("env:NOT_SET_ANYWHERE")
	if err := c.Prepare(Options{SkipSecrets: true}); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.LookupKey(""); ok {
		t.Fatal("unresolved virtual key indexed under the empty hash")
	}
}

func TestExplicitZeroes(t *testing.T) {
	y := `
retry: {num_retries: 0, min_retry_concurrency: 0}
breaker: {jitter: 0, reset_grace: 0s}
telemetry: {sample_ratio: 0}
accounting: {ledger_buffer: 0}
backends:
  - name: b
    base_url: http://127.0.0.1:1/v1
    keys:
      - {id: k1, secret: env:KEY_A1, weight: 0}
      - {id: k2, secret: env:KEY_A2}
models:
  - name: m
    targets:
      - {backend: b}
tenants: []
`
	c, err := Parse([]byte(y), "zero.yaml", Options{LookupEnv: lookupTestEnv})
	if err != nil {
		t.Fatal(err)
	}
	if c.Retry.NumRetries != 0 || c.Retry.MinRetryConcurrency != 0 || c.Breaker.Jitter != 0 || c.Breaker.ResetGrace.Duration != 0 || c.Telemetry.SampleRatio != 0 || c.Accounting.LedgerBuffer != 0 {
		t.Fatalf("explicit zeroes replaced by defaults: %+v %+v %+v", c.Retry, c.Breaker, c.Telemetry)
	}
	if c.Backends[0].Keys[0].Weight != 0 || c.Backends[0].Keys[1].Weight != 1 || c.Models[0].Targets[0].Weight != 1 {
		t.Fatal("weights")
	}
	d, err := Parse(DefaultYAML(), "default.yaml", Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Retry.NumRetries != 3 || d.Breaker.Jitter != 0.2 || d.Breaker.ResetGrace.Duration != 250*time.Millisecond || d.Telemetry.SampleRatio != 1 || d.Accounting.LedgerBuffer != 100000 {
		t.Fatal("defaults of zero-meaningful fields missing")
	}
}

func TestParseDocumentErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"empty", "", "x.yaml:1: config is empty"},
		{"comment only", "# nothing\n", "x.yaml:1: config is empty"},
		{"scalar", "hello\n", "x.yaml:1: config must be a YAML mapping"},
		{"list", "- a\n- b\n", "x.yaml:1: config must be a YAML mapping"},
		{"two documents", "tenants: []\n---\ntenants: []\n", "x.yaml:2: more than one YAML document"},
		{"tab indent", "redis:\n\tmode: cluster\n", "x.yaml:2: "},
		{"merge keys", "x: &d {rpm: 1}\n", `x.yaml:1: x: unknown field "x"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "x.yaml", Options{SkipSecrets: true})
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("got %v, want prefix %q", err, tc.want)
			}
		})
	}
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	y := `
backends:
  - &relay
    name: a
    base_url: http://127.0.0.1:1/v1
    keys: [{id: a1, secret: env:KEY_A1}]
  - <<: *relay
    name: b
    keys: [{id: b1, secret: env:KEY_A2, weight: 0}, {id: b2, secret: env:KEY_A2}]
models:
  - name: m
    targets:
      - {backend: a, price: &p {input_per_mtok: 1, output_per_mtok: 2}}
      - {backend: b, price: *p, priority: 1}
tenants: []
`
	c, err := Parse([]byte(y), "anchors.yaml", Options{LookupEnv: lookupTestEnv})
	if err != nil {
		t.Fatal(err)
	}
	if c.Backends[1].BaseURL != "http://127.0.0.1:1/v1" || c.Models[0].Targets[1].Price.OutputPerMTok != 2 || c.Backends[1].Keys[0].Weight != 0 {
		t.Fatalf("%+v", c.Backends[1])
	}
	bad := strings.Replace(y, "name: b", "nmae: b", 1)
	if _, err := Parse([]byte(bad), "anchors.yaml", Options{LookupEnv: lookupTestEnv}); err == nil || !strings.Contains(err.Error(), `backends[1].nmae: unknown field "nmae" (did you mean "name"?)`) {
		t.Fatalf("got %v", err)
	}
}

func TestSplitPath(t *testing.T) {
	for _, p := range []string{"backends[1].keys[0].secret", "tenants[0].model_limits[gpt-4.1].rpm", "backends[0].headers[X-A.b]", "redis.addrs[2]", "listen"} {
		if got := formatPath(splitPath(p)); got != p {
			t.Errorf("%s -> %s", p, got)
		}
	}
}

func TestLocateSyntaxErrorBounds(t *testing.T) {
	for _, reported := range []int{-5, 0, 1, 2, 100} {
		line, _ := locateSyntaxError([]byte("a: [\nb: c"), reported)
		if line < 1 || line > 2 {
			t.Errorf("reported %d -> line %d", reported, line)
		}
	}
}

func TestErrorFormat(t *testing.T) {
	cases := []struct {
		e    Error
		want string
	}{
		{Error{File: "a.yaml", Line: 3, Path: "x.y", Msg: "bad"}, "a.yaml:3: x.y: bad"},
		{Error{File: "a.yaml", Msg: "bad"}, "a.yaml: bad"},
		{Error{Path: "x", Msg: "bad"}, "x: bad"},
	}
	for _, tc := range cases {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
