package jsonscan

import "encoding/binary"

// block holds one bit per byte of a 64-byte block of the body (bit j is
// byte 64k+j) for each byte class str needs. A block is classified once
// and then serves every string in it: keys and short values are a few
// bytes each, so most blocks hold several strings.
//
// Bytes past the end of the body read as 0, a control byte, so a string
// that runs off the end stops there like at any bad byte.
type block struct {
	quote     uint64
	backslash uint64
	control   uint64 // < 0x20
	nonASCII  uint64 // >= 0x80
	word      uint64 // ASCII letters and bytes <= ' ' (in a valid string: the space)
	short     uint64 // n t r " \ /: the escapes that decode to one byte of their own class
}

// pastEnd is a block wholly past the end of the body: 64 zero bytes.
var pastEnd = block{control: ^uint64(0), word: ^uint64(0)}

// batch is how many consecutive blocks are classified at once: one call,
// its constants set up once.
const batch = 8

// blocks holds the classified blocks end-batch .. end-1.
type blocks struct {
	end int // 0: none
	b   [batch]block
}

// block returns block k's masks, classifying it and the ones after it if
// they are not held.
func (s *Scanner) block(k int) *block {
	i := s.blks.end - 1 - k
	if uint(i) >= batch {
		s.load(k)
		i = batch - 1
	}
	return &s.blks.b[batch-1-i]
}

// load classifies blocks k .. k+batch-1 of s.b.
func (s *Scanner) load(k int) {
	base := k << 6
	full := min(batch, max(0, (len(s.b)-base)>>6))
	if full > 0 {
		classify(s.b[base:base+full<<6], s.blks.b[:full])
	}
	for j := full; j < batch; j++ {
		o := base + j<<6
		if o >= len(s.b) {
			// One block past the end stops a string that runs off it.
			// The slots after it are left as they are: no string starts
			// past the end (Str checks), so none is ever read.
			s.blks.b[j] = pastEnd
			break
		}
		var pad [64]byte // the partial last block, padded
		copy(pad[:], s.b[o:])
		classify(pad[:], s.blks.b[j:j+1])
	}
	s.blks.end = k + batch
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
	l7  = 0x7f7f7f7f7f7f7f7f
)

// classifySWAR classifies the 64-byte blocks of src into dst, eight bytes
// at a time: each test sets the high bit of the bytes it holds for
// (exactly: no borrow crosses a byte), and gather packs those eight bits
// into a byte of the mask.
func classifySWAR(src []byte, dst []block) {
	for i := range dst {
		classifySWAR1((*[64]byte)(src[i<<6:]), &dst[i])
	}
}

func classifySWAR1(p *[64]byte, bl *block) {
	*bl = block{}
	for j := 0; j < 64; j += 8 {
		w := binary.LittleEndian.Uint64(p[j:])
		low := w & l7
		q := w ^ lsb*'"'
		bs := w ^ lsb*'\\'
		short := zeros(q) | zeros(bs) | zeros(w^lsb*'n') | zeros(w^lsb*'t') | zeros(w^lsb*'r') | zeros(w^lsb*'/')
		t := low | lsb*0x20 // ASCII letters case-folded
		letters := (t + lsb*(0x80-'a')) &^ (t + lsb*(0x80-'z'-1))
		sh := uint(j)
		bl.quote |= gather(zeros(q)) << sh
		bl.backslash |= gather(zeros(bs)) << sh
		bl.short |= gather(short) << sh
		bl.control |= gather(^((low + lsb*(0x80-0x20)) | w)) << sh
		bl.nonASCII |= gather(w) << sh
		bl.word |= gather((letters|^(low+lsb*(0x80-'!')))&^w) << sh
	}
}

// zeros sets the high bit of w's zero bytes.
func zeros(w uint64) uint64 { return ^((w&l7 + l7) | w) & msb }

// gather packs the high bits of w's eight bytes into eight bits, byte i's
// into bit i: the multiply moves bit 8i+7 to bit 56+i, without collisions.
func gather(w uint64) uint64 {
	return ((w & msb) >> 7) * 0x0102040810204080 >> 56
}
