package jsonscan

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"unicode/utf8"
)

// TestStringStats checks the word-at-a-time byte-class counts against a
// byte-by-byte reference, for strings long enough to flush the lanes and
// with escapes and multi-byte runes at every alignment.
func TestStringStats(t *testing.T) {
	alphabet := []string{"a", "Z", " ", "7", "{", "_", "é", "中", "😀", "\n", "\t", "\"", "\\", "/", "\u0001", "~", "@", "`"}
	rng := rand.New(rand.NewPCG(7, 9))
	for n := 0; n < 400; n++ {
		size := rng.IntN(40)
		if n%10 == 0 {
			size = 2000 + rng.IntN(3000) // > 254 words: lane flushes
		}
		var text []rune
		for len(text) < size {
			r, _ := utf8.DecodeRuneInString(alphabet[rng.IntN(len(alphabet))])
			text = append(text, r)
		}
		s := string(text)
		raw, _ := json.Marshal(s) // escapes quotes, controls, and <>& as \u00XX
		sc := Scanner{b: raw}
		var got TextStats
		if _, _, err := sc.Str(&got); err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		var want TextStats
		for i := 0; i < len(s); i++ {
			c := s[i]
			want.Bytes++
			switch {
			case c >= 0x80:
				want.NonASCII++
			case IsSymbol(c):
				want.Symbols++
			}
		}
		if got != want {
			t.Fatalf("len %d: stats %+v, want %+v\n%q", len(s), got, want, raw)
		}
	}
}
