package translator

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenAddrs stands in for DNS in golden tests.
var goldenAddrs = map[string][]string{
	"api.openai.com":    {"192.0.2.10", "192.0.2.11"},
	"relay.example.net": {"198.51.100.7"},
}

// TestGolden renders every resource generated from each testdata config as
// YAML and compares it with testdata/<name>.golden.yaml. A translation change
// is reviewed by reading the golden diff; `go test ./xds/translator -update`
// rewrites them.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range inputs {
		if strings.HasSuffix(in, ".golden.yaml") {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			cfg := loadTestdata(t, filepath.Base(in))
			r, err := Translate(cfg)
			if err != nil {
				t.Fatal(err)
			}
			eps := Endpoints(r.IR, EndpointState{Addrs: goldenAddrs, Unhealthy: map[string]bool{}})
			doc := map[string]any{}
			add := func(key string, ms ...proto.Message) {
				var list []any
				for _, m := range ms {
					list = append(list, toAny(t, m))
				}
				doc[key] = list
			}
			var ls, rs, cs, es []proto.Message
			for _, x := range r.Listeners {
				ls = append(ls, x)
			}
			for _, x := range r.Routes {
				rs = append(rs, x)
			}
			for _, x := range r.Clusters {
				cs = append(cs, x)
			}
			for _, x := range eps {
				es = append(es, x)
			}
			checkWire(t, name, ls, rs, cs, es, []proto.Message{r.RateLimit})
			add("listeners", ls...)
			add("routes", rs...)
			add("clusters", cs...)
			add("endpoints", es...)
			add("ratelimit", r.RateLimit)
			got, err := yaml.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the generated resources; run `go test ./xds/translator -update` and review the diff.\n%s", golden, firstDiff(string(want), string(got)))
			}
		})
	}
}

func toAny(t *testing.T, m proto.Message) any {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return "line " + itoa(i+1) + ":\n- " + w + "\n+ " + g
		}
	}
	return ""
}

func itoa(i int) string { return strconv.Itoa(i) }

// checkWire holds the resources' deterministic protobuf encoding, in the
// order Translate returns them, to testdata/<name>.wire.sha256: the YAML
// golden shows a change for review, the digest proves a refactoring left
// every byte Envoy receives unchanged.
func checkWire(t *testing.T, name string, groups ...[]proto.Message) {
	t.Helper()
	h := sha256.New()
	opts := proto.MarshalOptions{Deterministic: true}
	for _, g := range groups {
		for _, m := range g {
			b, err := opts.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			h.Write(b)
		}
	}
	got := hex.EncodeToString(h.Sum(nil)) + "\n"
	file := filepath.Join("testdata", name+".wire.sha256")
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s: the generated resources' wire encoding changed (got %s); run `go test ./xds/translator -update` and review the YAML golden diff", file, strings.TrimSpace(got))
	}
}
