package usage

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strconv"
)

// jscan walks upstream response JSON without building values. It is
// tolerant where that is cheap (scalars are not validated) but tracks
// strings and nesting exactly, so a "usage" inside a string or a nested
// object is never mistaken for the top-level one. Any structural problem
// sets bad and every method then returns quickly.
type jscan struct {
	b     []byte
	i     int
	depth int
	bad   bool
}

const maxDepth = 1000

func (s *jscan) ws() {
	// Provider JSON is mostly compact: one compare settles the usual case.
	if s.i < len(s.b) && s.b[s.i] > ' ' {
		return
	}
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *jscan) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// str consumes a string at s.i and returns its raw body (escapes intact).
// Strings in stream chunks are short, so it scans eight bytes at a time
// inline rather than calling bytes.IndexByte.
func (s *jscan) str() []byte {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	b := s.b
	start := s.i + 1
	i := start
	for {
		for i+8 <= len(b) {
			w := binary.LittleEndian.Uint64(b[i:])
			q := w ^ (lsb * '"')
			e := w ^ (lsb * '\\')
			if m := (((q - lsb) &^ q) | ((e - lsb) &^ e)) & msb; m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		for i < len(b) && b[i] != '"' && b[i] != '\\' {
			i++
		}
		if i >= len(b) {
			s.bad = true
			s.i = len(b)
			return nil
		}
		if b[i] == '"' {
			s.i = i + 1
			return b[start:i]
		}
		i += 2 // an escape; its second byte is never the closing quote
	}
}

// decodedLen is the UTF-8 length of a raw string body once unescaped.
func decodedLen(raw []byte) int {
	k := bytes.IndexByte(raw, '\\')
	if k < 0 {
		return len(raw)
	}
	n := k
	for i := k; i < len(raw); {
		if raw[i] != '\\' {
			n++
			i++
			continue
		}
		if i+1 < len(raw) && raw[i+1] == 'u' && i+6 <= len(raw) {
			r := hex4(raw[i+2 : i+6])
			switch {
			case r >= 0xD800 && r < 0xDC00 && i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u':
				n += 4
				i += 12
				continue
			case r < 0x80:
				n++
			case r < 0x800:
				n += 2
			default:
				n += 3
			}
			i += 6
			continue
		}
		n++
		i += 2
	}
	return n
}

func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0xFFFD
		}
		r = r<<4 | rune(c)
	}
	return r
}

// endsScalar marks the bytes that end a number or literal.
var endsScalar = [256]bool{',': true, '}': true, ']': true, ' ': true, '\t': true, '\n': true, '\r': true, ':': true, '"': true, '{': true, '[': true}

// scalar consumes a number or literal.
func (s *jscan) scalar() []byte {
	start := s.i
	for s.i < len(s.b) {
		if endsScalar[s.b[s.i]] {
			if s.i == start {
				s.bad = true
			}
			return s.b[start:s.i]
		}
		s.i++
	}
	if s.i == start {
		s.bad = true
	}
	return s.b[start:s.i]
}

func (s *jscan) skip() {
	switch s.peek() {
	case '"':
		s.str()
	case '{':
		s.object(func([]byte) { s.skip() })
	case '[':
		s.array(func() { s.skip() })
	case 0:
		s.bad = true
	default:
		s.scalar()
	}
}

// object walks the object at s.i; member must consume each value.
func (s *jscan) object(member func(key []byte)) {
	if s.depth++; s.depth > maxDepth {
		s.bad = true
		return
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		s.depth--
		return
	}
	for !s.bad {
		if s.peek() != '"' {
			s.bad = true
			return
		}
		key := s.str()
		if s.peek() != ':' {
			s.bad = true
			return
		}
		s.i++
		s.ws()
		member(key)
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			s.depth--
			return
		default:
			s.bad = true
		}
	}
}

func (s *jscan) array(elem func()) {
	if s.depth++; s.depth > maxDepth {
		s.bad = true
		return
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		s.depth--
		return
	}
	for !s.bad {
		elem()
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			s.depth--
			return
		default:
			s.bad = true
		}
	}
}

// number reads a numeric value; ok is false for null or non-numbers (which
// are skipped).
func (s *jscan) number() (float64, int64, bool) {
	c := s.peek()
	if c != '-' && (c < '0' || c > '9') {
		s.skip()
		return 0, 0, false
	}
	raw := s.scalar()
	// Integers, the usual case, without strconv.
	var n int64
	neg := false
	d := raw
	if len(d) > 0 && d[0] == '-' {
		neg, d = true, d[1:]
	}
	integer := len(d) > 0 && len(d) <= 18
	for _, ch := range d {
		if ch < '0' || ch > '9' {
			integer = false
			break
		}
		n = n*10 + int64(ch-'0')
	}
	if integer {
		if neg {
			n = -n
		}
		return float64(n), n, true
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return 0, 0, false
	}
	return f, int64(f), true
}

// stringValue returns the raw body of a string value, or skips a non-string.
func (s *jscan) stringValue() ([]byte, bool) {
	if s.peek() != '"' {
		s.skip()
		return nil, false
	}
	return s.str(), true
}
