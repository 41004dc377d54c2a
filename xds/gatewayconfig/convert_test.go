package gatewayconfig

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/swarmgate/swarmgate/internal/config"
	pb "github.com/swarmgate/swarmgate/protos/swarmgate/v1"
)

const secretValue = "sk-live-DO-NOT-LEAK-0123456789"

func env(string) (string, bool) { return secretValue, true }

// corpus: configs that between them set every section.
var corpus = []string{
	"../../internal/config/testdata/example.yaml",
	"../translator/testdata/default.yaml",
	"../translator/testdata/mixed.yaml",
	"../translator/testdata/mtls.yaml",
}

var opts = config.Options{LookupEnv: env, SkipSecrets: true}

// sent is what a replica must end up with: the config without the sections
// that stay local to each process.
func sent(t testing.TB, c *config.Config) []byte {
	t.Helper()
	s := *c
	s.Security, s.Admin = config.Security{}, config.Admin{}
	b, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// overWire sends cfg the way the control plane does and decodes it the way
// a replica does.
func overWire(t testing.TB, cfg *config.Config, o config.Options) (*config.Config, error) {
	t.Helper()
	gc, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wire, err := proto.Marshal(gc)
	if err != nil {
		t.Fatal(err)
	}
	got := new(pb.GatewayConfig)
	if err := proto.Unmarshal(wire, got); err != nil {
		t.Fatal(err)
	}
	return ToConfig(got, o)
}

func TestRoundTrip(t *testing.T) {
	for _, name := range corpus {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Load(name, opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := overWire(t, cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			if a, b := sent(t, cfg), sent(t, got); !bytes.Equal(a, b) {
				t.Errorf("round trip changed the config:\n%s\n---\n%s", a, b)
			}
			if got.Source != cfg.Source {
				t.Errorf("source %q, want %q", got.Source, cfg.Source)
			}
			if _, ok := got.Model(cfg.Models[0].Name); !ok {
				t.Error("index not built by ToConfig")
			}
			if !reflect.DeepEqual(got.Security, config.Security{}) || !reflect.DeepEqual(got.Admin, config.Admin{}) {
				t.Error("security or admin reached the replica")
			}
		})
	}
}

// TestSectionsReachReplicas names sections that once did not reach
// replicas when the wire form described the config field by field.
func TestSectionsReachReplicas(t *testing.T) {
	base, err := config.Load("../translator/testdata/default.yaml", opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := *base
	cfg.Admission.MaxWait = config.Duration{Duration: 7 * time.Second}
	cfg.Admission.MaxQueue = 1234
	b, err := json.Marshal(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := config.Parse(b, "edited.json", opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := overWire(t, parsed, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got.Admission.MaxWait.Duration != 7*time.Second || got.Admission.MaxQueue != 1234 {
		t.Errorf("admission on the replica: %+v", got.Admission)
	}
}

// TestRoundTripProperty: any valid config reaches a replica unchanged. Valid
// configs come from setting random values on random fields of the corpus
// configs and keeping what config.Parse accepts; most leaf fields of the
// model (four in five) must have been exercised with a changed value.
func TestRoundTripProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	samples := 600
	if testing.Short() {
		samples = 450
	}
	seeds := make([]*config.Config, len(corpus))
	for i, name := range corpus {
		c, err := config.Load(name, opts)
		if err != nil {
			t.Fatal(err)
		}
		seeds[i] = c
	}
	all := map[string]bool{}
	for _, s := range seeds {
		leaves(reflect.ValueOf(s).Elem(), "", func(path string, _ reflect.Value) { all[path] = true })
	}
	reached := map[string]bool{}
	valid := 0
	for i := range samples {
		seedJSON, err := json.Marshal(seeds[i%len(seeds)])
		if err != nil {
			t.Fatal(err)
		}
		var c config.Config
		if err := json.Unmarshal(seedJSON, &c); err != nil {
			// Secrets and units have no UnmarshalJSON; go through YAML.
			p, perr := config.Parse(seedJSON, "seed.json", opts)
			if perr != nil {
				t.Fatal(perr)
			}
			c = *p
		}
		type leaf struct {
			path string
			v    reflect.Value
		}
		var ls []leaf
		leaves(reflect.ValueOf(&c).Elem(), "", func(path string, v reflect.Value) { ls = append(ls, leaf{path, v}) })
		var changed []string
		for range 1 + r.IntN(3) {
			l := ls[r.IntN(len(ls))]
			if mutate(r, l.v) {
				changed = append(changed, l.path)
			}
		}
		b, err := json.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := config.Parse(b, "generated.json", opts)
		if err != nil {
			continue // not a valid config: nothing to carry
		}
		valid++
		for _, p := range changed {
			reached[p] = true
		}
		got, err := overWire(t, parsed, opts)
		if err != nil {
			t.Fatalf("sample %d: a valid config was refused by the replica: %v", i, err)
		}
		if a, b := sent(t, parsed), sent(t, got); !bytes.Equal(a, b) {
			t.Fatalf("sample %d changed on the way (fields %v):\n%s\n---\n%s", i, changed, a, b)
		}
	}
	if valid < samples/10 {
		t.Fatalf("only %d of %d generated configs were valid", valid, samples)
	}
	if len(reached)*5 < len(all)*4 {
		t.Fatalf("valid samples changed %d of %d leaf fields", len(reached), len(all))
	}
	t.Logf("%d valid configs of %d, %d of %d leaf fields changed", valid, samples, len(reached), len(all))
}

// leaves calls f on every settable scalar field under v, by its JSON path
// (slice indexes left out, so a path names a field of the model).
func leaves(v reflect.Value, path string, f func(string, reflect.Value)) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			leaves(v.Elem(), path, f)
		}
	case reflect.Struct:
		switch v.Interface().(type) {
		case config.Duration, config.Secret:
			f(path, v)
			return
		}
		t := v.Type()
		for i := range t.NumField() {
			sf := t.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if !sf.IsExported() || name == "-" || name == "" {
				continue
			}
			if path == "" && (name == "security" || name == "admin") {
				continue
			}
			leaves(v.Field(i), path+"."+name, f)
		}
	case reflect.Slice:
		for i := range v.Len() {
			leaves(v.Index(i), path+"[]", f)
		}
	case reflect.Map:
		if v.Type().Key().Kind() == reflect.String && v.Type().Elem().Kind() == reflect.String {
			f(path, v)
		}
	case reflect.Bool, reflect.String, reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64, reflect.Float64:
		if v.CanSet() {
			f(path, v)
		}
	}
}

// mutate sets v to a random value of its kind that is likely to be valid.
func mutate(r *rand.Rand, v reflect.Value) bool {
	if !v.CanSet() {
		return false
	}
	switch v.Interface().(type) {
	case config.Duration:
		d := []time.Duration{0, 250 * time.Millisecond, time.Second, 7 * time.Second, 5 * time.Minute}[r.IntN(5)]
		v.Set(reflect.ValueOf(config.Duration{Duration: d}))
		return true
	case config.Secret:
		return false
	case config.ByteSize:
		v.SetInt([]int64{0, 1 << 10, 1 << 20, 3 << 20}[r.IntN(4)])
		return true
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.String:
		if v.String() == "" {
			v.SetString([]string{"x", "fail_open", "fail_closed", "b"}[r.IntN(4)])
		} else {
			v.SetString(v.String() + []string{"", "2", "-x"}[r.IntN(3)])
		}
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt([]int64{0, 1, 2, 3, 7, 100, int64(r.IntN(100000))}[r.IntN(7)])
	case reflect.Uint32, reflect.Uint64:
		v.SetUint([]uint64{0, 1, 2, 3, 7, 100, uint64(r.IntN(100000))}[r.IntN(7)])
	case reflect.Float64:
		v.SetFloat([]float64{0, 0.000001, 0.25, 0.5, 1, 2.5, 1e9}[r.IntN(7)])
	case reflect.Map:
		v.Set(reflect.ValueOf(map[string]string{"x-team": "a\"b<c>&\u00e9"}).Convert(v.Type()))
	default:
		return false
	}
	return true
}

func TestNoSecretValues(t *testing.T) {
	// Secrets resolved (as on a control plane that has them): the wire form
	// still carries only references.
	cfg, err := config.Load("../translator/testdata/default.yaml", config.Options{LookupEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Backends[0].Keys[0].Secret.Value() != secretValue {
		t.Fatal("test setup: secret not resolved")
	}
	gc, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wire, err := proto.Marshal(gc)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(wire, []byte(secretValue)) {
		t.Fatal("a secret value reached the GatewayConfig")
	}
	if !bytes.Contains(gc.GetConfig(), []byte(cfg.Backends[0].Keys[0].Secret.Ref())) {
		t.Error("secret reference missing")
	}
	// A replica resolves the references itself.
	got, err := ToConfig(gc, config.Options{LookupEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	if got.Backends[0].Keys[0].Secret.Value() != secretValue {
		t.Error("replica did not resolve the secret reference")
	}
}

func TestToConfigRejects(t *testing.T) {
	cfg, err := config.Load("../translator/testdata/default.yaml", opts)
	if err != nil {
		t.Fatal(err)
	}
	good, err := FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target := []byte(`"backend":"` + cfg.Models[0].Targets[0].Backend + `"`)
	if !bytes.Contains(good.GetConfig(), target) {
		t.Fatalf("test setup: %s not in the wire form", target)
	}
	for _, tc := range []struct {
		name string
		edit func(*pb.GatewayConfig)
		want string
	}{
		{"unknown format", func(gc *pb.GatewayConfig) { gc.Format = 2 }, "format 2, this build reads 1"},
		{"no format", func(gc *pb.GatewayConfig) { gc.Format = 0 }, "format 0"},
		{"dangling reference", func(gc *pb.GatewayConfig) {
			gc.Config = bytes.Replace(gc.Config, target, []byte(`"backend":"nope"`), 1)
		}, "unknown backend"},
		{"truncated", func(gc *pb.GatewayConfig) { gc.Config = gc.Config[:len(gc.Config)/2] }, "gateway config from xDS"},
		{"empty", func(gc *pb.GatewayConfig) { gc.Config = nil }, "gateway config from xDS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gc := proto.Clone(good).(*pb.GatewayConfig)
			tc.edit(gc)
			if _, err := ToConfig(gc, opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}

// TestDeterministic: control-plane replicas that read the same file send the
// same bytes, so they agree on the snapshot version.
func TestDeterministic(t *testing.T) {
	for _, name := range corpus {
		a, err := config.Load(name, opts)
		if err != nil {
			t.Fatal(err)
		}
		b, err := config.Load(name, opts)
		if err != nil {
			t.Fatal(err)
		}
		ga, err := FromConfig(a)
		if err != nil {
			t.Fatal(err)
		}
		gb, err := FromConfig(b)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(ga, gb) {
			t.Errorf("%s: two loads gave different GatewayConfigs", name)
		}
	}
}

// TestVirtualKeySecretSentAsHash: a virtual key given by `secret:` is hashed
// at load on a control plane that resolves secrets (`serve`); the wire form
// carries that hash alone, so a replica accepts it without the secret.
// Before, it carried hash and secret and every replica refused the update
// ("set hash or secret, not both").
func TestVirtualKeySecretSentAsHash(t *testing.T) {
	raw, err := os.ReadFile("../translator/testdata/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(raw), "        hash: sha256:4855f154c11c373e2fdbfaa73255b7c171d898177ebea021b0ea7fa93d7a47b6\n",
		"        secret: env:DEMO_VIRTUAL_KEY\n", 1)
	cfg, err := config.Parse([]byte(y), "default.yaml", config.Options{LookupEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	want := config.HashKey(secretValue)
	if k := cfg.Tenants[0].Keys[0]; k.Hash != want || k.Secret.IsZero() {
		t.Fatalf("test setup: key %+v", k)
	}
	for name, o := range map[string]config.Options{"replica with secrets": {LookupEnv: env}, "replica without": {LookupEnv: func(string) (string, bool) { return "", false }, SkipSecrets: true}} {
		t.Run(name, func(t *testing.T) {
			got, err := overWire(t, cfg, o)
			if err != nil {
				t.Fatal(err)
			}
			if k := got.Tenants[0].Keys[0]; k.Hash != want || !k.Secret.IsZero() {
				t.Fatalf("replica's key %+v, want hash %s alone", k, want)
			}
		})
	}
	if cfg.Tenants[0].Keys[0].Secret.IsZero() {
		t.Error("FromConfig changed the control plane's own config")
	}
}
