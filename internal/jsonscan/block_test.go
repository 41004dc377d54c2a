package jsonscan

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestClassify checks the block masks, of every implementation this machine
// runs and for runs of 1 to 9 blocks, against a byte-by-byte reading of the
// classes.
func TestClassify(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 4000; n++ {
		p := make([]byte, 64*(1+n%9))
		for i := range p {
			switch n % 3 {
			case 0:
				p[i] = byte(rng.UintN(256))
			default: // the interesting bytes and their neighbours, densely
				p[i] = "\x00\x1f\x20\x21\"\\\x7f\x80\xffazAZ@[`{ \t\nntr/bfu"[rng.IntN(27)]
			}
		}
		want := make([]block, len(p)/64)
		for i, c := range p {
			bl, bit := &want[i/64], uint64(1)<<(i%64)
			l := c | 0x20
			if c == '"' {
				bl.quote |= bit
			}
			if c == '\\' {
				bl.backslash |= bit
			}
			if c < 0x20 {
				bl.control |= bit
			}
			if c >= 0x80 {
				bl.nonASCII |= bit
			}
			if c <= ' ' || (l >= 'a' && l <= 'z') {
				bl.word |= bit
			}
			if strings.IndexByte(`ntr"\/`, c) >= 0 {
				bl.short |= bit
			}
		}
		for name, classify := range classifiers() {
			got := make([]block, len(want))
			classify(p, got)
			for k := range got {
				if got[k] != want[k] {
					t.Fatalf("%s: block %d of %d: %q:\n got  %+v\n want %+v", name, k, len(got), p[64*k:64*k+64], got[k], want[k])
				}
			}
		}
	}
	var zeros [64]byte
	got := make([]block, 1)
	classifySWAR(zeros[:], got)
	if got[0] != pastEnd {
		t.Errorf("pastEnd = %+v, zero bytes classify as %+v", pastEnd, got[0])
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
