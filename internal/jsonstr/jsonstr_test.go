package jsonstr

import (
	"encoding/json"
	"testing"
)

// TestAppend: every input, invalid UTF-8 included, becomes valid JSON that
// decodes to what encoding/json makes of it.
func TestAppend(t *testing.T) {
	for _, s := range []string{"", "plain", "quote\" back\\slash", "ctl\x00\x1f\n\r\t", "bad\xff\xfeutf8", "ünïcode ✓", "sep\u2028\u2029", "<b>&</b>"} {
		b := Append(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q → %s: %v", s, b, err)
		}
		want, _ := json.Marshal(s)
		var w string
		_ = json.Unmarshal(want, &w)
		if got != w {
			t.Errorf("%q: got %q want %q", s, got, w)
		}
		if Len(s) != len(b) {
			t.Errorf("%q: Len %d, written %d", s, Len(s), len(b))
		}
	}
}

func FuzzAppend(f *testing.F) {
	f.Add("a\"b\\c\x00\xff\u2028")
	f.Fuzz(func(t *testing.T, s string) {
		b := Append(nil, s)
		if !json.Valid(b) || Len(s) != len(b) {
			t.Fatalf("%q → %s (Len %d): invalid JSON or a wrong length", s, b, Len(s))
		}
	})
}

func BenchmarkAppend(b *testing.B) {
	s := "The model `gpt-4o-mini` does not exist or you do not have access to it."
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = Append(buf[:0], s)
	}
}
