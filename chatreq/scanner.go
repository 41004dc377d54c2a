package chatreq

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// maxDepth bounds nesting like encoding/json does, so a body of a million '['
// is rejected instead of recursing a million frames.
const maxDepth = 10000

// scanner validates JSON (RFC 8259 grammar; like encoding/json it does not
// reject invalid UTF-8 inside strings) while walking it without building
// values. Methods leave i just past what they consumed.
type scanner struct {
	b     []byte
	i     int
	depth int
}

func (s *scanner) errAt(off int, msg string) error { return newSyntaxError(s.b, off, msg) }

func (s *scanner) errHere(msg string) error {
	if s.i >= len(s.b) {
		return s.errAt(len(s.b), "unexpected end of JSON input")
	}
	return s.errAt(s.i, msg+" "+quoteByte(s.b[s.i]))
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return "'" + string(rune(c)) + "'"
	}
	const hex = "0123456789abcdef"
	return "byte 0x" + string([]byte{hex[c>>4], hex[c&15]})
}

func (s *scanner) ws() {
	b, i := s.b, s.i
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			s.i = i
			return
		}
	}
	s.i = i
}

// expect consumes byte c after optional whitespace.
func (s *scanner) expect(c byte, what string) error {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return nil
	}
	return s.errHere("expected " + what + ", found")
}

// textStats accumulates decoded sizes of text strings, by the byte classes
// the token estimate weighs differently.
type textStats struct {
	bytes    int // decoded UTF-8 bytes
	nonASCII int // bytes >= 0x80
	symbols  int // ASCII bytes that are neither letters nor whitespace
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
	l7  = 0x7f7f7f7f7f7f7f7f
)

// special flags, in the high bit of each byte, '"', '\\' and control
// bytes of w. Only the lowest flagged byte is exact (borrows propagate
// upwards), which is the only one used.
func special(w uint64) uint64 {
	q := w ^ (lsb * '"')
	e := w ^ (lsb * '\\')
	return (((q - lsb) &^ q) | ((e - lsb) &^ e) | ((w - lsb*0x20) &^ w)) & msb
}

// classLanes returns, one per byte lane selected by sel (high bits), 1 for
// non-ASCII bytes and 1 for letters and spaces. Raw strings hold no control
// bytes (JSON requires them escaped), so an ASCII byte below '!' is a space.
func classLanes(w, sel uint64) (non, word uint64) {
	t := (w | lsb*0x20) & l7 // case folded, low 7 bits
	wordish := ((t + lsb*(0x80-'a')) &^ (t + lsb*(0x80-'z'-1))) | ^((w & l7) + lsb*(0x80-'!'))
	return (w & sel) >> 7, (wordish &^ w & sel) >> 7
}

// hsum adds the eight byte lanes of x.
func hsum(x uint64) int {
	const m = 0x00ff00ff00ff00ff
	return int((((x & m) + ((x >> 8) & m)) * 0x0001000100010001) >> 48)
}

func byteIsSymbol(c byte) bool {
	l := c | 0x20
	return c < 0x80 && c != ' ' && c != '\t' && c != '\n' && c != '\r' && (l < 'a' || l > 'z')
}

// str scans a string whose opening quote is at s.i and returns its raw
// content (escapes not decoded) and whether it contains escapes. When st is
// not nil the decoded length and byte classes are added to it.
//
// The loop reads eight bytes at a time and handles the common escapes
// without leaving it: agent traffic is code and JSON inside strings, with an
// escape every few bytes. Counters are plain locals so they stay in
// registers.
func (s *scanner) str(st *textStats) (raw []byte, escaped bool, err error) {
	b := s.b
	start := s.i + 1
	i := start
	// saved: bytes escapes save when decoded; non, sym: byte classes seen
	// outside the word loop's lanes.
	saved, non, sym := 0, 0, 0
	// Word-loop byte classes, counted in per-byte lanes and flushed before
	// a lane can overflow, so no popcount runs per word.
	var nonLanes, wordLanes uint64 // non-ASCII bytes; letters and spaces
	lanesUsed := 0
	for {
		var w, m uint64
		switch {
		case i+16 <= len(b):
			// Sixteen bytes per step while there is nothing to stop at;
			// when there is, the masks computed here are reused.
			w1 := binary.LittleEndian.Uint64(b[i:])
			w2 := binary.LittleEndian.Uint64(b[i+8:])
			m1, m2 := special(w1), special(w2)
			if m1|m2 == 0 {
				if st != nil {
					n1, l1 := classLanes(w1, msb)
					n2, l2 := classLanes(w2, msb)
					nonLanes += n1 + n2
					wordLanes += l1 + l2
					sym += 16
					lanesUsed += 2
				}
				i += 16
			} else {
				if m1 == 0 {
					if st != nil {
						n1, l1 := classLanes(w1, msb)
						nonLanes += n1
						wordLanes += l1
						sym += 8
						lanesUsed++
					}
					i += 8
					w1, m1 = w2, m2
				}
				w, m = w1, m1
			}
		case i+8 <= len(b):
			w = binary.LittleEndian.Uint64(b[i:])
			if m = special(w); m == 0 {
				if st != nil {
					n1, l1 := classLanes(w, msb)
					nonLanes += n1
					wordLanes += l1
					sym += 8
					lanesUsed++
				}
				i += 8
			}
		}
		if lanesUsed >= 252 { // a lane holds 255; at most 3 are added per step
			n := hsum(nonLanes)
			non += n
			sym -= n + hsum(wordLanes)
			nonLanes, wordLanes, lanesUsed = 0, 0, 0
		}
		if m == 0 {
			if i+8 <= len(b) {
				continue
			}
			break
		}
		k := bits.TrailingZeros64(m) >> 3
		if st != nil && k > 0 {
			n1, l1 := classLanes(w, msb&(1<<(8*uint(k))-1))
			nonLanes += n1
			wordLanes += l1
			sym += k
			lanesUsed++
		}
		i += k
		c := b[i]
		if c == '"' {
			break
		}
		if c < 0x20 {
			return nil, false, s.errAt(i, "invalid control character in string")
		}
		escaped = true
		if i+1 < len(b) { // the two-byte escapes, inline
			switch b[i+1] {
			case 'n', 't', 'r':
				i += 2
				saved++
				continue
			case '"', '\\', '/', 'b', 'f':
				i += 2
				saved++
				sym++
				continue
			}
		}
		n, dn, ds, err := s.escape(i)
		if err != nil {
			return nil, false, err
		}
		i += n
		saved += n - dn
		sym += ds
		if dn > 1 {
			non += dn
		}
	}
	// Fewer than eight bytes were left in the body: byte at a time.
	for i < len(b) && b[i] != '"' {
		c := b[i]
		switch {
		case c < 0x20:
			return nil, false, s.errAt(i, "invalid control character in string")
		case c == '\\':
			escaped = true
			n, dn, ds, err := s.escape(i)
			if err != nil {
				return nil, false, err
			}
			i += n
			saved += n - dn
			sym += ds
			if dn > 1 {
				non += dn
			}
			continue
		case c >= 0x80:
			non++
		case byteIsSymbol(c):
			sym++
		}
		i++
	}
	if i >= len(b) {
		return nil, false, s.errAt(len(b), "unexpected end of JSON input in string")
	}
	s.i = i + 1
	if st != nil {
		n := hsum(nonLanes)
		st.bytes += i - start - saved
		st.nonASCII += non + n
		st.symbols += sym - n - hsum(wordLanes)
	}
	return b[start:i], escaped, nil
}

// escape decodes the size of the escape at b[i] (a backslash): its length
// n, its decoded length dl, and how many decoded bytes are ASCII symbols
// (the rest, for dl > 1, are non-ASCII; \\n \\r \\t are whitespace).
func (s *scanner) escape(i int) (n, dl, symbols int, err error) {
	b := s.b
	if i+1 >= len(b) {
		return 0, 0, 0, s.errAt(len(b), "unexpected end of JSON input in string escape")
	}
	switch b[i+1] {
	case 'n', 't', 'r':
		return 2, 1, 0, nil
	case '"', '\\', '/', 'b', 'f':
		return 2, 1, 1, nil
	case 'u':
	default:
		return 0, 0, 0, s.errAt(i, "invalid escape in string")
	}
	r, ok := hex4(b, i+2)
	if !ok {
		return 0, 0, 0, s.errAt(i, "invalid \\u escape in string")
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
	case dl == 1 && byteIsSymbol(byte(r)):
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

// number scans a JSON number at s.i. It reports whether it is an integer
// (no fraction or exponent).
func (s *scanner) number() (integer bool, err error) {
	b, i := s.b, s.i
	integer = true
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i++
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		s.i = i
		return false, s.errHere("invalid number: found")
	}
	if i < len(b) && b[i] == '.' {
		integer = false
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			s.i = i
			return false, s.errHere("invalid number: expected digit after '.', found")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		integer = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			s.i = i
			return false, s.errHere("invalid number: expected digit in exponent, found")
		}
	}
	s.i = i
	return integer, nil
}

func (s *scanner) literal(lit string) error {
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return nil
	}
	// Point at the first byte that differs.
	j := 0
	for s.i+j < len(s.b) && j < len(lit) && s.b[s.i+j] == lit[j] {
		j++
	}
	s.i += j
	return s.errHere("invalid literal: found")
}

// skip validates and skips one value (leading whitespace allowed).
func (s *scanner) skip() error {
	s.ws()
	if s.i >= len(s.b) {
		return s.errHere("")
	}
	switch c := s.b[s.i]; c {
	case '"':
		_, _, err := s.str(nil)
		return err
	case '{':
		return s.object(func(_ []byte, _ bool) error { return s.skip() })
	case '[':
		return s.array(func() error { return s.skip() })
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			_, err := s.number()
			return err
		}
		return s.errHere("invalid character")
	}
}

// object walks an object at s.i ('{'). For each member it calls member with
// the raw key after consuming the ':'; member must consume the value.
func (s *scanner) object(member func(key []byte, escaped bool) error) error {
	if s.depth++; s.depth > maxDepth {
		return s.errAt(s.i, "exceeded max nesting depth")
	}
	s.i++ // '{'
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return s.errHere("expected string key, found")
		}
		key, esc, err := s.str(nil)
		if err != nil {
			return err
		}
		if err := s.expect(':', "':' after object key"); err != nil {
			return err
		}
		if err := member(key, esc); err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.errHere("")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			s.depth--
			return nil
		default:
			return s.errHere("expected ',' or '}' after object member, found")
		}
	}
}

// array walks an array at s.i ('['), calling elem for each element.
func (s *scanner) array(elem func() error) error {
	if s.depth++; s.depth > maxDepth {
		return s.errAt(s.i, "exceeded max nesting depth")
	}
	s.i++ // '['
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.errHere("")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			s.depth--
			return nil
		default:
			return s.errHere("expected ',' or ']' after array element, found")
		}
	}
}

// peek returns the next non-space byte (0 at end) without consuming it.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// keyIs compares a raw key with a plain ASCII name, decoding escapes only
// when present (a client may spell "model" as "m\u006fdel").
func keyIs(raw []byte, escaped bool, name string) bool {
	if !escaped {
		return string(raw) == name
	}
	var buf [32]byte
	d, ok := unescape(buf[:0], raw)
	return ok && string(d) == name
}

// unescape appends the decoded form of a raw string body to dst.
func unescape(dst, raw []byte) ([]byte, bool) {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		if i+1 >= len(raw) {
			return dst, false
		}
		switch raw[i+1] {
		case '"', '\\', '/':
			dst = append(dst, raw[i+1])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(raw, i+2)
			if !ok {
				return dst, false
			}
			i += 6
			if r >= 0xD800 && r < 0xDC00 && i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
				if r2, ok := hex4(raw, i+2); ok && r2 >= 0xDC00 && r2 < 0xE000 {
					r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
					i += 6
				}
			}
			dst = utf8.AppendRune(dst, r) // lone surrogates become U+FFFD
			continue
		default:
			return dst, false
		}
		i += 2
	}
	return dst, true
}
