package config

import (
	"strings"
	"testing"
)

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

// A presented key costs no allocation to look up, however long (up to the
// 256 bytes hashed from the stack): generated keys are longer than the 32
// bytes a []byte conversion keeps off the heap.
func TestLookupKeyAllocatesNothing(t *testing.T) {
	c, err := Parse(DefaultYAML(), "default.yaml", Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"sk-swarmgate-demo", "sk-sg-" + strings.Repeat("A", 43), strings.Repeat("k", 256)} {
		if n := testing.AllocsPerRun(100, func() { c.LookupKey(k) }); n != 0 {
			t.Errorf("%d-byte key: %v allocations per lookup", len(k), n)
		}
	}
	if _, ok := c.LookupKey(strings.Repeat("k", 300)); ok {
		t.Error("a 300-byte key found")
	}
}
