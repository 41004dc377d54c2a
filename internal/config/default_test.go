package config

import "testing"

func TestDefaultConfigParses(t *testing.T) {
	env := map[string]string{"SWARMGATE_DEMO_KEY_A1": "sk-a1", "SWARMGATE_DEMO_KEY_A2": "sk-a2", "SWARMGATE_DEMO_KEY_B1": "sk-b1"}
	c, err := Parse(DefaultYAML(), "default.yaml", Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := c.LookupKey("sk-swarmgate-demo"); !ok || o.Tenant.Name != "demo" {
		t.Fatalf("demo key not found: %+v", o)
	}
	b, _ := c.Backend("relay-a")
	if b.Port() != 18101 || b.BasePath() != "/v1" || b.UpstreamPath("/v1/chat/completions") != "/v1/chat/completions" {
		t.Fatalf("relay-a url: %d %q", b.Port(), b.BasePath())
	}
	if _, err := Parse(DefaultYAML(), "default.yaml", Options{LookupEnv: func(string) (string, bool) { return "", false }}); err == nil {
		t.Fatal("missing env vars accepted")
	} else {
		t.Log(err)
	}
}
