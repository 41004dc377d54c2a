package chatmessages

// A one-pass JSON reader for stream events: it walks an object's members
// and checks every value's syntax as it steps over it (RFC 8259, as
// json.Valid does, which the fuzz test holds it to), so an event is read
// and validated without decoding or allocating. Values are raw bytes; a
// string the client gets is copied as the literal it is.

import "unicode/utf8"

// chatMessagesMaxDepth is json.Valid's nesting limit.
const chatMessagesMaxDepth = 10000

func chatMessagesSkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// chatMessagesValid reports whether b is one JSON value (with white space
// around it).
func chatMessagesValid(b []byte) bool {
	end := chatMessagesValueEnd(b, chatMessagesSkipSpace(b, 0), 0)
	return end >= 0 && chatMessagesSkipSpace(b, end) == len(b)
}

// chatMessagesValueEnd is the index just past the JSON value starting at
// b[i], or -1 when none starts there. depth counts the enclosing arrays
// and objects.
func chatMessagesValueEnd(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return chatMessagesStringEnd(b, i)
	case c == '{':
		if depth >= chatMessagesMaxDepth {
			return -1
		}
		i = chatMessagesSkipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return -1
			}
			if i = chatMessagesStringEnd(b, i); i < 0 {
				return -1
			}
			i = chatMessagesSkipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return -1
			}
			if i = chatMessagesValueEnd(b, chatMessagesSkipSpace(b, i+1), depth+1); i < 0 {
				return -1
			}
			i = chatMessagesSkipSpace(b, i)
			if i >= len(b) {
				return -1
			}
			if b[i] == '}' {
				return i + 1
			}
			if b[i] != ',' {
				return -1
			}
			i = chatMessagesSkipSpace(b, i+1)
		}
	case c == '[':
		if depth >= chatMessagesMaxDepth {
			return -1
		}
		i = chatMessagesSkipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1
		}
		for {
			if i = chatMessagesValueEnd(b, i, depth+1); i < 0 {
				return -1
			}
			i = chatMessagesSkipSpace(b, i)
			if i >= len(b) {
				return -1
			}
			if b[i] == ']' {
				return i + 1
			}
			if b[i] != ',' {
				return -1
			}
			i = chatMessagesSkipSpace(b, i+1)
		}
	case c == 't':
		return chatMessagesLiteralEnd(b, i, "true")
	case c == 'f':
		return chatMessagesLiteralEnd(b, i, "false")
	case c == 'n':
		return chatMessagesLiteralEnd(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return chatMessagesNumberEnd(b, i)
	}
	return -1
}

func chatMessagesLiteralEnd(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

func chatMessagesDigitsEnd(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func chatMessagesNumberEnd(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = chatMessagesDigitsEnd(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := chatMessagesDigitsEnd(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := chatMessagesDigitsEnd(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func chatMessagesIsHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// chatMessagesStringEnd is the index just past the string literal at
// b[i] (a '"'), or -1 when the literal is not valid JSON.
func chatMessagesStringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i <= 4 || !chatMessagesIsHex(b[i+1]) || !chatMessagesIsHex(b[i+2]) ||
					!chatMessagesIsHex(b[i+3]) || !chatMessagesIsHex(b[i+4]) {
					return -1
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

// chatMessagesMembers walks an object's members, checking each value:
//
//	for m := (chatMessagesMembers{b: obj}); m.next(); { use m.key, m.val }
//	m.ok() // the whole of b was one valid object
//
// key is the raw text between the key's quotes, val the raw value.
type chatMessagesMembers struct {
	b        []byte
	i        int
	key, val []byte
	started  bool
	closed   bool // the object's closing brace was read
	bad      bool
}

func (m *chatMessagesMembers) fail() bool {
	m.bad, m.key, m.val = true, nil, nil
	return false
}

func (m *chatMessagesMembers) next() bool {
	if m.bad || m.closed {
		return false
	}
	b := m.b
	i := chatMessagesSkipSpace(b, m.i)
	if !m.started {
		m.started = true
		if i >= len(b) || b[i] != '{' {
			return m.fail()
		}
		i = chatMessagesSkipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			m.closed, m.i = true, i+1
			return false
		}
	} else {
		switch {
		case i < len(b) && b[i] == '}':
			m.closed, m.i = true, i+1
			return false
		case i < len(b) && b[i] == ',':
			i = chatMessagesSkipSpace(b, i+1)
		default:
			return m.fail()
		}
	}
	if i >= len(b) || b[i] != '"' {
		return m.fail()
	}
	end := chatMessagesStringEnd(b, i)
	if end < 0 {
		return m.fail()
	}
	m.key = b[i+1 : end-1]
	i = chatMessagesSkipSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		return m.fail()
	}
	i = chatMessagesSkipSpace(b, i+1)
	end = chatMessagesValueEnd(b, i, 1)
	if end < 0 {
		return m.fail()
	}
	m.val, m.i = b[i:end], end
	return true
}

// ok reports, after next returned false, that b held exactly one valid
// object.
func (m *chatMessagesMembers) ok() bool {
	return !m.bad && m.closed && chatMessagesSkipSpace(m.b, m.i) == len(m.b)
}

// chatMessagesIsString: a raw value that is a JSON string literal a client
// can be sent as it is (valid UTF-8).
func chatMessagesIsString(raw []byte) bool {
	return len(raw) >= 2 && raw[0] == '"' && utf8.Valid(raw)
}

// chatMessagesInt reads a raw non-negative integer; ok is false for
// anything else (null, a fraction, a sign, too many digits).
func chatMessagesInt(raw []byte) (n int64, ok bool) {
	if len(raw) == 0 || len(raw) > 18 {
		return 0, false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
