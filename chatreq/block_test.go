package chatreq

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestClassify checks the block masks, of every implementation this machine
// runs, against a byte-by-byte reading of the classes.
func TestClassify(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var p [64]byte
	for n := 0; n < 20000; n++ {
		for i := range p {
			switch n % 3 {
			case 0:
				p[i] = byte(rng.UintN(256))
			default: // the interesting bytes and their neighbours, densely
				p[i] = "\x00\x1f\x20\x21\"\\\x7f\x80\xffazAZ@[`{ \t\nntr/bfu"[rng.IntN(27)]
			}
		}
		var want block
		for i, c := range p {
			bit := uint64(1) << i
			l := c | 0x20
			if c == '"' {
				want.quote |= bit
			}
			if c == '\\' {
				want.backslash |= bit
			}
			if c < 0x20 {
				want.control |= bit
			}
			if c >= 0x80 {
				want.nonASCII |= bit
			}
			if c <= ' ' || (l >= 'a' && l <= 'z') {
				want.word |= bit
			}
			if strings.IndexByte(`ntr"\/`, c) >= 0 {
				want.short |= bit
			}
		}
		for name, classify := range classifiers() {
			var got block
			classify(&p, &got)
			if got != want {
				t.Fatalf("%s: %q:\n got  %+v\n want %+v", name, p, got, want)
			}
		}
	}
}

// TestEscapes checks the escaped-byte masks, carried across blocks, against
// reading the backslashes one by one.
func TestEscapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 20000; n++ {
		blocks := make([]uint64, 1+rng.IntN(4))
		for i := range blocks {
			// Runs of backslashes of every length, at every alignment.
			density := rng.IntN(4)
			for j := 0; j < 64; j++ {
				if rng.IntN(4) < density {
					blocks[i] |= 1 << j
				}
			}
		}
		var carry uint64
		escapedNext := false // the reference's state
		for i, bs := range blocks {
			got := escapes(bs, &carry)
			var want uint64
			for j := 0; j < 64; j++ {
				switch {
				case escapedNext:
					want |= 1 << j
					escapedNext = false
				case bs&(1<<j) != 0:
					escapedNext = true
				}
			}
			if got != want || (carry == 1) != escapedNext {
				t.Fatalf("block %d of %x: escaped %064b carry %d\nwant %064b carry %v", i, blocks, got, carry, want, escapedNext)
			}
		}
	}
}
