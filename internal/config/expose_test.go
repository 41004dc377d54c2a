package config

import (
	"strings"
	"testing"
)

// backends[].expose_upstream_model is a boolean, false by default; YAML
// that is not a boolean is refused with its path.
func TestExposeUpstreamModel(t *testing.T) {
	doc := func(v string) string {
		return `
backends:
  - name: relay
    base_url: http://127.0.0.1:1/v1
` + v + `    keys: [{id: k1, secret: "env:NOPE"}]
models: [{name: m, targets: [{backend: relay, model: relay-model}]}]
tenants: [{name: t, keys: [{id: v1, hash: "sha256:` + strings.Repeat("0", 64) + `"}], models: ["*"]}]
`
	}
	for _, tc := range []struct {
		line string
		want bool
		err  string
	}{
		{"", false, ""},
		{"    expose_upstream_model: true\n", true, ""},
		{"    expose_upstream_model: false\n", false, ""},
		{"    expose_upstream_model: [yes]\n", false, "expose_upstream_model"},
	} {
		cfg, err := Parse([]byte(doc(tc.line)), "t.yaml", Options{SkipSecrets: true})
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want one naming %s", tc.line, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.line, err)
		case cfg.Backends[0].ExposeUpstreamModel != tc.want:
			t.Errorf("%q: expose_upstream_model %v, want %v", tc.line, cfg.Backends[0].ExposeUpstreamModel, tc.want)
		}
	}
}
