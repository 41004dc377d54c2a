package responseschat

import "unicode/utf8"

// responsesChatDeltaChunk is what the one-pass scanner reads from the
// chunks that make up almost all of a chat stream: one choice whose delta
// is text, a refusal, or one tool call's next arguments. Strings stay
// escaped as the backend sent them (validated JSON string contents): the
// translation copies them into its events without decoding them.
type responsesChatDeltaChunk struct {
	content, refusal []byte // nil when absent, null or ""
	args             []byte // a tool call's arguments delta
	argsIndex        int
	hasArgs          bool
	finish           []byte // finish_reason, nil when null
}

// responsesChatScanDelta reads a chunk of that shape in one pass without
// allocating. It answers false for anything else (the first chunk, a
// tool call's opening delta with its id and name, usage, an error, a
// second choice, JSON it does not expect): those take encoding/json.
func responsesChatScanDelta(data []byte, d *responsesChatDeltaChunk) bool {
	*d = responsesChatDeltaChunk{}
	s := responsesChatScanner{b: data}
	choices := 0
	ok := s.object(func(key []byte) bool {
		switch string(key) {
		case "choices":
			return s.array(func() bool {
				choices++
				return choices == 1 && s.object(func(key []byte) bool {
					switch string(key) {
					case "index":
						return s.literal("0")
					case "delta":
						return s.object(func(key []byte) bool {
							switch string(key) {
							case "content":
								return s.nullableString(&d.content)
							case "refusal":
								return s.nullableString(&d.refusal)
							case "role":
								var role []byte
								return s.nullableString(&role)
							case "tool_calls":
								calls := 0
								return s.array(func() bool {
									calls++
									return calls == 1 && s.toolCallArgs(d)
								})
							}
							return s.skip(0) // what the translation does not read
						})
					case "finish_reason":
						return s.nullableString(&d.finish)
					}
					return s.skip(0)
				})
			})
		case "usage", "error":
			return s.literal("null")
		}
		return s.skip(0)
	})
	return ok && choices == 1 && s.end()
}

// toolCallArgs reads {"index":n,"function":{"arguments":"…"}}: a tool
// call's later delta, without id or name.
func (s *responsesChatScanner) toolCallArgs(d *responsesChatDeltaChunk) bool {
	d.hasArgs = true
	sawIndex := false
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "index":
			n, ok := s.smallInt()
			d.argsIndex, sawIndex = n, ok
			return ok
		case "function":
			return s.object(func(key []byte) bool {
				switch string(key) {
				case "arguments":
					return s.nullableString(&d.args)
				case "name":
					return false // the call's opening delta
				}
				return s.skip(0)
			})
		case "id":
			return false // the call's opening delta
		}
		return s.skip(0)
	}) && sawIndex
}

// responsesChatScanner walks JSON text; every method answers false for
// text it does not accept.
type responsesChatScanner struct {
	b []byte
	i int
}

const responsesChatMaxDepth = 32

func (s *responsesChatScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *responsesChatScanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *responsesChatScanner) end() bool { s.ws(); return s.i == len(s.b) }

// object reads an object, calling member with each key (the scanner then
// at its value, which member must read).
func (s *responsesChatScanner) object(member func(key []byte) bool) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		key, ok := s.str()
		if !ok || s.peek() != ':' {
			return false
		}
		s.i++
		if !member(key) {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// array reads an array, calling elem at each element.
func (s *responsesChatScanner) array(elem func() bool) bool {
	if s.peek() != '[' {
		return false
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// str reads a string and returns its contents still escaped: valid UTF-8,
// no control characters, only JSON's escapes.
func (s *responsesChatScanner) str() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	s.i++
	start, ascii := s.i, true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			return v, ascii || utf8.Valid(v)
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return nil, false
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) {
					return nil, false
				}
				for _, h := range s.b[s.i+2 : s.i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return nil, false
					}
				}
				s.i += 6
			default:
				return nil, false
			}
		case c < 0x20:
			return nil, false
		default:
			if c >= utf8.RuneSelf {
				ascii = false
			}
			s.i++
		}
	}
	return nil, false
}

// nullableString reads a string or null into *v (nil for null or "").
func (s *responsesChatScanner) nullableString(v *[]byte) bool {
	if s.peek() == 'n' {
		*v = nil
		return s.literal("null")
	}
	str, ok := s.str()
	if len(str) == 0 {
		str = nil
	}
	*v = str
	return ok
}

func (s *responsesChatScanner) literal(word string) bool {
	s.ws()
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return s.i == len(s.b) || !('a' <= s.b[s.i] && s.b[s.i] <= 'z' || '0' <= s.b[s.i] && s.b[s.i] <= '9')
}

// smallInt reads a non-negative integer below 10⁶ (a tool call index).
func (s *responsesChatScanner) smallInt() (int, bool) {
	s.ws()
	n, start := 0, s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' && s.i-start < 6 {
		n = n*10 + int(s.b[s.i]-'0')
		s.i++
	}
	if s.i == start || s.i < len(s.b) && ('0' <= s.b[s.i] && s.b[s.i] <= '9' || s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	if s.b[start] == '0' && s.i-start > 1 {
		return 0, false
	}
	return n, true
}

// skip reads any value.
func (s *responsesChatScanner) skip(depth int) bool {
	if depth > responsesChatMaxDepth {
		return false
	}
	switch c := s.peek(); {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{':
		return s.object(func([]byte) bool { return s.skip(depth + 1) })
	case c == '[':
		return s.array(func() bool { return s.skip(depth + 1) })
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	return false
}

// number reads a JSON number.
func (s *responsesChatScanner) number() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() bool {
		start := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if !digits() {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	s.i = i
	return true
}
