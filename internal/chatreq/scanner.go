package chatreq

import "unicode/utf8"

// maxDepth bounds nesting like encoding/json does, so a body of a million '['
// is rejected instead of recursing a million frames.
const maxDepth = 10000

// scanner validates JSON (RFC 8259 grammar; like encoding/json it does not
// reject invalid UTF-8 inside strings) while walking it without building
// values. Methods leave i just past what they consumed.
type scanner struct {
	cdepth int // nested content (tool_result blocks) being read
	b      []byte
	i      int
	depth  int
	blks   blocks // the byte classes of the 64-byte blocks str reads
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
	// Request bodies are mostly compact: one compare decides, inline.
	if s.i < len(s.b) && s.b[s.i] > ' ' {
		return
	}
	s.spaces()
}

func (s *scanner) spaces() {
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
	return escapedKeyIs(raw, name)
}

func escapedKeyIs(raw []byte, name string) bool {
	var buf [maxKey]byte
	return string(decodeKey(&buf, raw)) == name
}

// maxKey bounds the keys decoded for a match: the longest name the scan
// looks for, with every byte \u-escaped, fits.
const maxKey = 6 * len("max_completion_tokens")

// decodeKey returns a key with escapes decoded into buf. A key too long to
// be one of the names looked for comes back raw: it still holds a
// backslash, so it matches none. Callers declare buf only for escaped
// keys, so plain ones do not pay for zeroing it.
func decodeKey(buf *[maxKey]byte, raw []byte) []byte {
	if len(raw) > maxKey {
		return raw
	}
	if d, ok := unescape(buf[:0], raw); ok {
		return d
	}
	return raw
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
