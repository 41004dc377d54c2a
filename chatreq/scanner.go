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

// wordClasses counts, exactly, the non-ASCII bytes and the ASCII bytes that
// are not letters or spaces in the bytes of w selected by sel (high bits).
// Raw strings hold no tabs or newlines (those must be escaped).
func wordClasses(w, sel uint64) (nonASCII, symbols int) {
	ascii := ^w & sel
	t := (w | lsb*0x20) & l7 // fold case; low 7 bits
	ge := (t + lsb*(0x80-'a')) & msb
	gt := (t + lsb*(0x80-'z'-1)) & msb
	letters := ge &^ gt & ascii
	sp := w ^ (lsb * ' ')
	spaces := ^(((sp & l7) + l7) | sp | l7) & sel
	nonASCII = bits.OnesCount64(w & sel & msb)
	symbols = bits.OnesCount64(ascii) - bits.OnesCount64(letters) - bits.OnesCount64(spaces)
	return nonASCII, symbols
}

func byteIsSymbol(c byte) bool {
	l := c | 0x20
	return c < 0x80 && c != ' ' && c != '\t' && c != '\n' && c != '\r' && (l < 'a' || l > 'z')
}

// str scans a string whose opening quote is at s.i and returns its raw
// content (escapes not decoded) and whether it contains escapes. When st is
// not nil the decoded length and byte classes are added to it.
func (s *scanner) str(st *textStats) (raw []byte, escaped bool, err error) {
	b := s.b
	start := s.i + 1
	i := start
	var acc textStats // bytes holds what escapes save when decoded
	for {
		// Eight bytes at a time: flag '"', '\\' and control bytes. The lowest
		// flagged byte is exact (borrows only propagate upwards).
		for i+8 <= len(b) {
			w := binary.LittleEndian.Uint64(b[i:])
			q := w ^ (lsb * '"')
			e := w ^ (lsb * '\\')
			m := ((q - lsb) &^ q) | ((e - lsb) &^ e) | ((w - lsb*0x20) &^ w)
			m &= msb
			if m != 0 {
				k := bits.TrailingZeros64(m) >> 3
				if st != nil && k > 0 {
					n, sy := wordClasses(w, msb&(1<<(8*uint(k))-1))
					acc.nonASCII += n
					acc.symbols += sy
				}
				i += k
				break
			}
			if st != nil {
				n, sy := wordClasses(w, msb)
				acc.nonASCII += n
				acc.symbols += sy
			}
			i += 8
		}
		// Byte at a time up to the next special byte (tail of the input, or
		// the byte the word loop stopped at).
		for i < len(b) {
			c := b[i]
			if c == '"' || c == '\\' || c < 0x20 {
				break
			}
			if c >= 0x80 {
				acc.nonASCII++
			} else if byteIsSymbol(c) {
				acc.symbols++
			}
			i++
		}
		if i >= len(b) {
			return nil, false, s.errAt(len(b), "unexpected end of JSON input in string")
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			if st != nil {
				st.bytes += i - start - acc.bytes
				st.nonASCII += acc.nonASCII
				st.symbols += acc.symbols
			}
			return b[start:i], escaped, nil
		case c < 0x20:
			return nil, false, s.errAt(i, "invalid control character in string")
		}
		// Backslash.
		escaped = true
		if i+1 >= len(b) {
			return nil, false, s.errAt(len(b), "unexpected end of JSON input in string escape")
		}
		switch c := b[i+1]; c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			acc.bytes++
			if c != 'n' && c != 'r' && c != 't' {
				acc.symbols++
			}
			i += 2
		case 'u':
			r, ok := hex4(b, i+2)
			if !ok {
				return nil, false, s.errAt(i, "invalid \\u escape in string")
			}
			if r >= 0xD800 && r < 0xDC00 {
				if r2, ok2 := hex4(b, i+8); ok2 && b[i+6] == '\\' && b[i+7] == 'u' && r2 >= 0xDC00 && r2 < 0xE000 {
					acc.bytes += 12 - 4
					acc.nonASCII += 4
					i += 12
					continue
				}
			}
			dl := utf8.RuneLen(r)
			if dl < 0 { // lone surrogate: decoders substitute U+FFFD
				dl = 3
			}
			if dl > 1 {
				acc.nonASCII += dl
			} else if byteIsSymbol(byte(r)) {
				acc.symbols++
			}
			acc.bytes += 6 - dl
			i += 6
		default:
			return nil, false, s.errAt(i, "invalid escape in string")
		}
	}
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
