package config

import "testing"

func BenchmarkLookupKey(b *testing.B) {
	c, err := Parse(DefaultYAML(), "default.yaml", Options{SkipSecrets: true})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := c.LookupKey("sk-swarmgate-demo"); !ok {
			b.Fatal("not found")
		}
	}
}

func TestLookupKeyMisses(t *testing.T) {
	c, err := Parse(DefaultYAML(), "default.yaml", Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"", "sk-swarmgate-demo ", "SK-SWARMGATE-DEMO", HashKey("sk-swarmgate-demo")} {
		if _, ok := c.LookupKey(k); ok {
			t.Errorf("%q found", k)
		}
	}
	if _, ok := c.LookupKey("sk-swarmgate-demo"); !ok {
		t.Fatal("demo key not found")
	}
}
