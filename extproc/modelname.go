package extproc

import (
	"bytes"

	"github.com/swarmgate/swarmgate/internal/jsonstr"
)

// namerState is where a modelNamer is in a rename: `"model" : "value"`.
type namerState uint8

const (
	namerScan   namerState = iota // following the JSON's structure
	namerKey                      // after an answer's "model" key: spaces, then ':'
	namerColon                    // after ':': spaces, then the value's '"'
	namerValue                    // inside the old value: dropped up to its closing '"'
	namerEscape                   // after a '\' inside the old value
)

// keyBufLen holds the longest key the namer looks at ("response").
const keyBufLen = 8

// modelNamer rewrites the model an answer names to the alias the client
// asked for, chunk by chunk, following the JSON's nesting without building
// it. Only the answer's own "model" is renamed: a key of the top-level
// object (chat completions and their chunks, Anthropic messages, Responses
// objects) or of the object under a top-level "response" or "message" key
// (Responses events, Anthropic message_start). A "model" deeper down is
// data — a tool call's input, a Responses object's metadata — and passes
// untouched. Each SSE event's data is its own top-level document; SSE
// framing between documents is skipped. It holds nothing back across
// chunks: the new value is written where the old one opens and the old
// one's bytes are dropped up to its closing quote, in whichever chunk that
// comes. A chunk without a rename passes untouched (no copy). It is reused
// across the pooled stream's requests (reset).
type modelNamer struct {
	alias []byte // the alias as a JSON string, quotes included
	out   []byte // the last changed Write's result
	state namerState

	depth    int     // open objects and arrays; 0 between documents
	kind     [3]byte // '{' or '[' at depths 1 and 2
	answer   [3]bool // the object at that depth is the answer's own
	inStr    bool
	esc      bool
	isKey    bool // the open string is a key of an object at depth ≤ 2
	wantKey  bool // the next string at this depth (≤ 2) is a key
	keyLen   int  // bytes of the open key so far
	keyBuf   [keyBufLen]byte
	underAns bool // the last top-level key was "response" or "message"
}

func (m *modelNamer) reset(alias string) {
	m.alias = jsonstr.Append(m.alias[:0], alias)
	m.state, m.depth, m.inStr, m.esc, m.isKey, m.wantKey, m.keyLen, m.underAns = namerScan, 0, false, false, false, false, 0, false
}

// Write returns the chunk with the model renamed, and whether it differs
// from the chunk as given (changed: the bytes must replace the chunk).
func (m *modelNamer) Write(chunk []byte) (out []byte, changed bool) {
	out = m.out[:0]
	// chunk[last:i] is still to be written; bytes of an old value are
	// skipped by moving last past them.
	last, i := 0, 0
	if m.state == namerValue || m.state == namerEscape {
		changed = true // the old value's tail is dropped from this chunk
	}
	for i < len(chunk) {
		switch m.state {
		case namerScan:
			i = m.scan(chunk, i)
		case namerKey, namerColon:
			switch c := chunk[i]; {
			case c == ' ' || c == '\t' || c == '\n' || c == '\r':
				i++
			case c == ':' && m.state == namerKey:
				i++
				m.state = namerColon
			case c == '"' && m.state == namerColon:
				// The value opens: write the alias in its place.
				out = append(append(out, chunk[last:i]...), m.alias...)
				changed = true
				i++
				last, m.state = i, namerValue
			default:
				// Not a string value: follow it as any other.
				m.state, m.wantKey = namerScan, false
			}
		case namerValue:
			k := indexEither(chunk[i:], '"', '\\')
			if k < 0 {
				i = len(chunk)
				continue
			}
			i += k + 1
			if chunk[i-1] == '"' {
				m.state, m.wantKey = namerScan, false
			} else {
				m.state = namerEscape
			}
			last = i
		case namerEscape:
			i++
			last, m.state = i, namerValue
		}
	}
	if !changed {
		return chunk, false
	}
	if m.state != namerValue && m.state != namerEscape {
		out = append(out, chunk[last:]...)
	}
	m.out = out
	return out, true
}

// scan follows the JSON structure from chunk[i] until the chunk ends or an
// answer's "model" key has closed (state namerKey), and returns where it
// stopped.
func (m *modelNamer) scan(chunk []byte, i int) int {
	for i < len(chunk) {
		if m.inStr {
			if m.esc {
				m.esc = false
				m.keyLen = keyBufLen + 1 // an escaped key is none we look for
				i++
				continue
			}
			k := indexEither(chunk[i:], '"', '\\')
			if k < 0 {
				m.keepKey(chunk[i:])
				return len(chunk)
			}
			m.keepKey(chunk[i : i+k])
			i += k + 1
			if chunk[i-1] == '\\' {
				m.esc = true
				continue
			}
			m.inStr = false
			if m.isKey && m.closeKey() {
				m.state = namerKey
				return i
			}
			continue
		}
		if m.depth == 0 {
			// Between documents (SSE framing): only a document's start
			// matters.
			k := indexEither(chunk[i:], '{', '[')
			if k < 0 {
				return len(chunk)
			}
			i += k
		}
		c := chunk[i]
		i++
		switch c {
		case '"':
			m.inStr = true
			m.isKey = m.wantKey && m.depth <= 2
			m.wantKey, m.keyLen = false, 0
		case '{', '[':
			m.depth++
			if m.depth <= 2 {
				m.kind[m.depth] = c
				m.answer[m.depth] = c == '{' && (m.depth == 1 || (m.underAns && m.kind[1] == '{'))
				m.wantKey = c == '{'
			}
		case '}', ']':
			if m.depth > 0 {
				m.depth--
			}
			m.wantKey = false
		case ',':
			m.wantKey = m.depth >= 1 && m.depth <= 2 && m.kind[m.depth] == '{'
		}
	}
	return i
}

// keepKey keeps the start of an open key.
func (m *modelNamer) keepKey(b []byte) {
	if !m.isKey || m.keyLen > keyBufLen {
		return
	}
	n := copy(m.keyBuf[m.keyLen:], b)
	if n < len(b) {
		m.keyLen = keyBufLen + 1
		return
	}
	m.keyLen += n
}

// closeKey notes a key that has just closed and reports whether it is an
// answer's "model".
func (m *modelNamer) closeKey() bool {
	m.isKey = false
	key := m.keyBuf[:min(m.keyLen, keyBufLen)]
	if m.keyLen > keyBufLen {
		key = nil
	}
	if m.depth == 1 {
		m.underAns = string(key) == "response" || string(key) == "message"
	}
	return string(key) == "model" && m.answer[m.depth]
}

// indexEither is bytes.IndexAny(b, string([]byte{x, y})): a plain loop over
// the first bytes (an answer's keys and most of an SSE chunk's strings are
// short, and a call to IndexByte costs more than looking at them), then the
// vectorised IndexByte. IndexAny tests a set byte by byte: the strings of an
// answer's content were most of what renaming a model cost (about 1 µs per
// 2 KB answer).
func indexEither(b []byte, x, y byte) int {
	const short = 16
	for i := range min(len(b), short) {
		if c := b[i]; c == x || c == y {
			return i
		}
	}
	if len(b) <= short {
		return -1
	}
	rest := b[short:]
	i := bytes.IndexByte(rest, x)
	end := i
	if i < 0 {
		end = len(rest)
	}
	if j := bytes.IndexByte(rest[:end], y); j >= 0 {
		return short + j
	}
	if i < 0 {
		return -1
	}
	return short + i
}
