package jsonscan

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// TextStats accumulates decoded sizes of strings, by the byte classes a
// token estimate weighs differently.
type TextStats struct {
	Bytes    int // decoded UTF-8 bytes
	NonASCII int // bytes >= 0x80
	Symbols  int // ASCII bytes that are neither letters nor whitespace
}

// IsSymbol reports whether c is an ASCII byte that is neither a letter nor
// white space (digits and punctuation).
func IsSymbol(c byte) bool {
	l := c | 0x20
	return c < 0x80 && c != ' ' && c != '\t' && c != '\n' && c != '\r' && (l < 'a' || l > 'z')
}

// escKind classifies the byte after an escaping backslash.
// The short ones (n t r " \ /) are found with block.short instead.
var escKind = [256]uint8{
	'b': escControl, 'f': escControl,
	'u': escUnicode,
}

const (
	escInvalid = iota
	escControl // \b, \f: decode to a control byte, counted as a symbol
	escUnicode // \uXXXX
)

// Str scans a string whose opening quote is at the position (no white
// space before it) and returns
// its raw content (escapes not decoded) and whether it contains escapes.
// When st is not nil the decoded length and byte classes are added to it.
//
// It works on the bit masks of 64-byte blocks (block.go), so its cost does
// not depend on how often the string is interrupted: agent traffic is code
// and JSON inside strings, with an escape every few bytes. The byte classes
// are counted on the raw bytes with popcounts and then corrected for each
// escape. Anything irregular (a control byte, a bad escape, the end of the
// body) goes to strSlow, which reports the first bad byte as a sequential
// reader would.
func (s *Scanner) Str(st *TextStats) (raw []byte, escaped bool, err error) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false, s.errHere("expected string, found")
	}
	// Most strings are keys and short values that end in the block already
	// classified, with no escape: the short way.
	start := s.i + 1
	k := start >> 6
	if i := s.blks.end - 1 - k; uint(i) < batch {
		bl := &s.blks.b[batch-1-i]
		from := ^uint64(0) << uint(start&63)
		q := bl.quote & from
		in := from & (q&-q - 1)
		if q != 0 && (bl.backslash|bl.control)&in == 0 {
			end := k<<6 + bits.TrailingZeros64(q)
			if st != nil {
				n, non := bits.OnesCount64(in), bits.OnesCount64(bl.nonASCII&in)
				st.Bytes += n
				st.NonASCII += non
				st.Symbols += n - non - bits.OnesCount64(bl.word&in)
			}
			s.i = end + 1
			return s.b[start:end], false, nil
		}
		if q == 0 && (bl.backslash|bl.control)&from == 0 && i > 0 {
			// It runs into the next block, also held: a string that only
			// crosses a block boundary is still the short way.
			bl2 := &s.blks.b[batch-i]
			q2 := bl2.quote
			in2 := q2&-q2 - 1
			if q2 != 0 && (bl2.backslash|bl2.control)&in2 == 0 {
				end := (k+1)<<6 + bits.TrailingZeros64(q2)
				if st != nil {
					n, non := bits.OnesCount64(from)+bits.OnesCount64(in2), bits.OnesCount64(bl.nonASCII&from)+bits.OnesCount64(bl2.nonASCII&in2)
					st.Bytes += n
					st.NonASCII += non
					st.Symbols += n - non - bits.OnesCount64(bl.word&from) - bits.OnesCount64(bl2.word&in2)
				}
				s.i = end + 1
				return s.b[start:end], false, nil
			}
		}
	} else if raw, ok := s.strShort(st); ok {
		// Not classified yet: a short string need not be.
		return raw, false, nil
	}
	return s.strBlocks(st)
}

// shortString is how far strShort looks for the closing quote.
const shortString = 64

// strShort reads a short string without escapes byte by byte: in a small
// document (a stream event, a value cut out of one) most strings are
// keys and short values, and classifying a block costs more than they do.
// ok is false for anything else, left to strBlocks.
func (s *Scanner) strShort(st *TextStats) (raw []byte, ok bool) {
	b := s.b
	start := s.i + 1
	j, stop := start, min(len(b), start+shortString)
	for j+8 <= stop { // eight bytes at a time, the masks of block.go
		w := binary.LittleEndian.Uint64(b[j:])
		m := zeros(w^lsb*'"') | zeros(w^lsb*'\\') | ^((w&l7+lsb*(0x80-0x20))|w)&msb
		if m != 0 {
			j += bits.TrailingZeros64(m) >> 3
			break
		}
		j += 8
	}
	for j < stop && b[j] != '"' && b[j] != '\\' && b[j] >= 0x20 {
		j++
	}
	if j == stop || b[j] != '"' {
		return nil, false
	}
	if st != nil {
		st.Bytes += j - start
		for _, c := range b[start:j] {
			switch {
			case c >= 0x80:
				st.NonASCII++
			case IsSymbol(c):
				st.Symbols++
			}
		}
	}
	s.i = j + 1
	return b[start:j], true
}

// strBlocks is Str for strings that cross blocks or hold escapes.
func (s *Scanner) strBlocks(st *TextStats) (raw []byte, escaped bool, err error) {
	b := s.b
	start := s.i + 1
	p := start
	var carry uint64 // 1: the first byte of the next block is escaped
	// Raw bytes of the string by class, from the masks; the escapes.
	n, non, word := 0, 0, 0
	var t escTally
	for {
		k := p >> 6
		bl := s.block(k)
		base := k << 6
		from := ^uint64(0) << uint(p-base)
		e := escapes(bl.backslash&from, &carry)
		in := from // the string's bytes in this block
		q := bl.quote & from &^ e
		if q != 0 {
			in &= q&-q - 1
		}
		if bl.control&in != 0 {
			return s.strSlow(st)
		}
		if e &= in; e != 0 {
			escaped = true
			// The common escapes are counted at once; the others one by one.
			odd := e &^ bl.short
			t.esc += bits.OnesCount64(e &^ odd)
			if odd != 0 && !s.tallyOdd(&t, odd, base) {
				return s.strSlow(st)
			}
		}
		if st != nil {
			n += bits.OnesCount64(in)
			non += bits.OnesCount64(bl.nonASCII & in)
			word += bits.OnesCount64(bl.word & in)
		}
		if q != 0 {
			end := base + bits.TrailingZeros64(q)
			s.i = end + 1
			if st != nil {
				st.Bytes += n - t.esc - t.uRaw + t.u.Bytes
				st.NonASCII += non + t.u.NonASCII
				st.Symbols += n - non - word - t.esc + t.ctrl - t.uRawSym + t.u.Symbols
			}
			return b[start:end], escaped, nil
		}
		// The body goes on: past its end the block reads as control bytes.
		p = base + 64
	}
}

// escTally corrects the raw byte counts of a string for its escapes.
type escTally struct {
	esc, ctrl int // two-byte escapes; those that decode to \b or \f
	// \u escapes: their raw bytes and raw symbols, and what they decode to.
	uRaw, uRawSym int
	u             TextStats
	pairEnd       int // a surrogate pair decoded up to here
}

// tallyOdd counts the escapes of a block that are not short ones (odd
// holds their escaped bytes); false for an invalid one.
func (s *Scanner) tallyOdd(t *escTally, odd uint64, base int) bool {
	b := s.b
	for ; odd != 0; odd &= odd - 1 {
		j := base + bits.TrailingZeros64(odd)
		switch escKind[b[j]] {
		case escControl:
			t.esc++
			t.ctrl++
		case escUnicode:
			if j < t.pairEnd { // the low half of a pair
				continue
			}
			ln, dl, ds, err := s.escape(j - 1)
			if err != nil {
				return false
			}
			t.pairEnd = j - 1 + ln
			t.uRaw += ln
			for _, c := range b[j-1 : t.pairEnd] {
				if IsSymbol(c) {
					t.uRawSym++
				}
			}
			t.u.Bytes += dl
			t.u.Symbols += ds
			if dl > 1 {
				t.u.NonASCII += dl
			}
		default:
			return false
		}
	}
	return true
}

// escapes returns the bits of bs's block that are escaped: preceded by a
// backslash that is not itself escaped. carry says whether the block's first
// byte is escaped by the previous block, and is set for the next one. A run
// of backslashes escapes every second byte after its start, so what matters
// is where each run starts and whether it is odd in length.
func escapes(bs uint64, carry *uint64) uint64 {
	const even = 0x5555555555555555
	bs &^= *carry // an escaped backslash escapes nothing
	follows := bs<<1 | *carry
	// Runs starting on odd bits: adding the start to the run carries out
	// of its end, leaving a bit just past it; for runs starting on even bits
	// the same works with the parity flipped.
	oddStarts := bs &^ even &^ follows
	sum, c := bits.Add64(oddStarts, bs, 0)
	*carry = c
	return (even ^ sum<<1) & follows
}

// strSlow is str byte by byte, from the opening quote at s.i.
func (s *Scanner) strSlow(st *TextStats) (raw []byte, escaped bool, err error) {
	b := s.b
	start := s.i + 1
	i := start
	var t TextStats
	for i < len(b) && b[i] != '"' {
		c := b[i]
		switch {
		case c < 0x20:
			return nil, false, s.ErrAt(i, "invalid control character in string")
		case c == '\\':
			escaped = true
			n, dn, ds, err := s.escape(i)
			if err != nil {
				return nil, false, err
			}
			i += n
			t.Bytes += dn
			t.Symbols += ds
			if dn > 1 {
				t.NonASCII += dn
			}
			continue
		case c >= 0x80:
			t.NonASCII++
		case IsSymbol(c):
			t.Symbols++
		}
		t.Bytes++
		i++
	}
	if i >= len(b) {
		return nil, false, s.ErrAt(len(b), "unexpected end of JSON input in string")
	}
	s.i = i + 1
	if st != nil {
		st.Bytes += t.Bytes
		st.NonASCII += t.NonASCII
		st.Symbols += t.Symbols
	}
	return b[start:i], escaped, nil
}

// escape decodes the size of the escape at b[i] (a backslash): its length
// n, its decoded length dl, and how many decoded bytes are ASCII symbols
// (the rest, for dl > 1, are non-ASCII; \\n \\r \\t are whitespace).
func (s *Scanner) escape(i int) (n, dl, symbols int, err error) {
	b := s.b
	if i+1 >= len(b) {
		return 0, 0, 0, s.ErrAt(len(b), "unexpected end of JSON input in string escape")
	}
	switch b[i+1] {
	case 'n', 't', 'r':
		return 2, 1, 0, nil
	case '"', '\\', '/', 'b', 'f':
		return 2, 1, 1, nil
	case 'u':
	default:
		return 0, 0, 0, s.ErrAt(i, "invalid escape in string")
	}
	r, ok := hex4(b, i+2)
	if !ok {
		return 0, 0, 0, s.ErrAt(i, "invalid \\u escape in string")
	}
	if r >= 0xD800 && r < 0xDC00 {
		if r2, ok2 := hex4(b, i+8); ok2 && b[i+6] == '\\' && b[i+7] == 'u' && r2 >= 0xDC00 && r2 < 0xE000 {
			return 12, 4, 0, nil
		}
	}
	dl = utf8.RuneLen(r)
	switch {
	case dl < 0: // lone surrogate: decoders substitute U+FFFD
		return 6, 3, 0, nil
	case dl == 1 && IsSymbol(byte(r)):
		return 6, 1, 1, nil
	case dl == 1:
		return 6, 1, 0, nil
	}
	return 6, dl, 0, nil
}

// hex4 decodes four hex digits at b[i:i+4].
func hex4(b []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
