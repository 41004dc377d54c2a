// Package jsonscan is the gateway's one JSON reader: a validating scanner
// (RFC 8259 grammar; like encoding/json it does not reject invalid UTF-8
// inside strings) that walks a document in place without building values
// or allocating. Callers walk objects and arrays with callbacks (Object,
// Array) or pull members one by one (Iter), take strings raw with their
// decoded size (Str), and skip what they do not read (Skip).
//
// Strings are read on the bit masks of 64-byte blocks classified with
// SSE2/AVX2 on amd64 (block_amd64.s), SWAR elsewhere or with the purego
// build tag.
package jsonscan

import "strconv"

// MaxDepth bounds nesting like encoding/json does, so a body of a million
// '[' is rejected instead of recursing a million frames.
const MaxDepth = 10000

// Scanner walks one JSON document. Methods leave the position just past
// what they consumed; errors are *SyntaxError. The zero value scans an
// empty document; Reset points it at another. It holds the classified
// blocks of the document (about 400 bytes): keep it on the stack or in a
// long-lived struct rather than allocating one per call.
type Scanner struct {
	b     []byte
	i     int
	depth int
	blks  blocks // the byte classes of the 64-byte blocks Str reads
}

// Reset makes s scan b from its start.
func (s *Scanner) Reset(b []byte) { s.b, s.i, s.depth, s.blks.end = b, 0, 0, 0 }

// Bytes is the document.
func (s *Scanner) Bytes() []byte { return s.b }

// Pos is the offset of the next byte to read.
func (s *Scanner) Pos() int { return s.i }

// Seek moves to offset i of the same document (e.g. past a byte Peek
// returned, or back to a value found earlier).
func (s *Scanner) Seek(i int) { s.i = i }

// SyntaxError reports malformed JSON and where it is. Line and Col are
// 1-based; Col counts bytes.
type SyntaxError struct {
	Offset int // byte offset of the offending byte (len(body) at unexpected end)
	Line   int
	Col    int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return "invalid JSON at line " + strconv.Itoa(e.Line) + ", column " + strconv.Itoa(e.Col) +
		" (offset " + strconv.Itoa(e.Offset) + "): " + e.Msg
}

// ErrAt is a *SyntaxError at byte offset off of the document.
func (s *Scanner) ErrAt(off int, msg string) error {
	b := s.b
	line, col := 1, 1
	off = min(off, len(b))
	for _, c := range b[:off] {
		if c == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return &SyntaxError{Offset: off, Line: line, Col: col, Msg: msg}
}

func (s *Scanner) errHere(msg string) error {
	if s.i >= len(s.b) {
		return s.ErrAt(len(s.b), "unexpected end of JSON input")
	}
	return s.ErrAt(s.i, msg+" "+quoteByte(s.b[s.i]))
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return "'" + string(rune(c)) + "'"
	}
	const hex = "0123456789abcdef"
	return "byte 0x" + string([]byte{hex[c>>4], hex[c&15]})
}

// WS skips white space.
func (s *Scanner) WS() {
	// Documents are mostly compact: one compare decides, inline.
	if s.i < len(s.b) && s.b[s.i] > ' ' {
		return
	}
	s.spaces()
}

func (s *Scanner) spaces() {
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

// Peek returns the next non-space byte (0 at the end) without consuming it.
func (s *Scanner) Peek() byte {
	s.WS()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// Expect consumes byte c after optional white space; what names it in the
// error.
func (s *Scanner) Expect(c byte, what string) error {
	s.WS()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return nil
	}
	return s.errHere("expected " + what + ", found")
}

// Trailing accepts only white space up to the end of the document.
func (s *Scanner) Trailing() error {
	s.WS()
	if s.i < len(s.b) {
		return s.ErrAt(s.i, "invalid character "+quoteByte(s.b[s.i])+" after top-level value")
	}
	return nil
}

// Literal consumes lit (true, false or null).
func (s *Scanner) Literal(lit string) error {
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

// Skip validates and skips one value (leading white space allowed).
func (s *Scanner) Skip() error {
	s.WS()
	if s.i >= len(s.b) {
		return s.errHere("")
	}
	switch c := s.b[s.i]; c {
	case '"':
		_, _, err := s.Str(nil)
		return err
	case '{':
		return s.Object(func(_ []byte, _ bool) error { return s.Skip() })
	case '[':
		return s.Array(s.Skip)
	case 't':
		return s.Literal("true")
	case 'f':
		return s.Literal("false")
	case 'n':
		return s.Literal("null")
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			_, _, err := s.Number()
			return err
		}
		return s.errHere("invalid character")
	}
}

// Value validates and skips one value and returns its raw bytes.
func (s *Scanner) Value() ([]byte, error) {
	s.WS()
	start := s.i
	err := s.Skip()
	return s.b[start:s.i], err
}

// Object walks an object at the position ('{' after optional white
// space). For each member it calls member with the raw key (escapes not
// decoded; escaped says whether it has any) after consuming the ':';
// member must consume the value.
func (s *Scanner) Object(member func(key []byte, escaped bool) error) error {
	if err := s.open('{', "'{'"); err != nil {
		return err
	}
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	for {
		s.WS()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return s.errHere("expected string key, found")
		}
		key, esc, err := s.Str(nil)
		if err != nil {
			return err
		}
		if s.i < len(s.b) && s.b[s.i] == ':' { // compact JSON: no call
			s.i++
		} else if err := s.Expect(':', "':' after object key"); err != nil {
			return err
		}
		if err := member(key, esc); err != nil {
			return err
		}
		// Inline rather than s.next: a call per member shows in the scan.
		s.WS()
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

// Array walks an array at the position ('[' after optional white space),
// calling elem for each element; elem must consume it.
func (s *Scanner) Array(elem func() error) error {
	if err := s.open('[', "'['"); err != nil {
		return err
	}
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		s.WS()
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

// Objects walks an array of objects (tool calls, choices, content parts):
// member gets the members of each element that is an object; other
// elements, and a value that is not an array, are skipped.
func (s *Scanner) Objects(member func(key []byte, escaped bool) error) error {
	if s.Peek() != '[' {
		return s.Skip()
	}
	return s.Array(func() error {
		if s.Peek() != '{' {
			return s.Skip()
		}
		return s.Object(member)
	})
}

// open consumes the opening byte of a container and the space after it.
func (s *Scanner) open(c byte, what string) error {
	s.WS()
	if s.i >= len(s.b) || s.b[s.i] != c {
		return s.errHere("expected " + what + ", found")
	}
	if s.depth++; s.depth > MaxDepth {
		return s.ErrAt(s.i, "exceeded max nesting depth")
	}
	s.i++
	s.WS()
	return nil
}

// next consumes the ',' before a container's next item (more) or its
// closing byte.
func (s *Scanner) next(closing byte, msg string) (more bool, err error) {
	s.WS()
	if s.i >= len(s.b) {
		return false, s.errHere("")
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return true, nil
	case closing:
		s.i++
		s.depth--
		return false, nil
	}
	return false, s.errHere(msg)
}

// Number scans a JSON number and returns its raw bytes and whether it is
// an integer (no fraction or exponent).
func (s *Scanner) Number() (raw []byte, integer bool, err error) {
	b, i := s.b, s.i
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		s.i = i
		return nil, false, s.errHere("invalid number: found")
	}
	integer = true
	if i < len(b) && b[i] == '.' {
		integer = false
		if d := digits(b, i+1); d > i+1 {
			i = d
		} else {
			s.i = d
			return nil, false, s.errHere("invalid number: expected digit after '.', found")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		integer = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if d := digits(b, i); d > i {
			i = d
		} else {
			s.i = d
			return nil, false, s.errHere("invalid number: expected digit in exponent, found")
		}
	}
	s.i = i
	return b[start:i], integer, nil
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// Valid reports whether b is one JSON value with optional white space
// around it, as json.Valid does.
func Valid(b []byte) bool {
	var s Scanner
	s.Reset(b)
	return s.Skip() == nil && s.Trailing() == nil
}
