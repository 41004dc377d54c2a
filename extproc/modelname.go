package extproc

import (
	"bytes"

	"github.com/swarmgate/swarmgate/internal/jsonstr"
)

// modelKey is the JSON key whose string value names the model in every
// family's answer: chat completions and their chunks, Responses objects and
// events, Anthropic messages and message_start.
var modelKey = []byte(`"model"`)

// namerState is where a modelNamer is in `"model" : "value"`.
type namerState uint8

const (
	namerScan   namerState = iota // looking for the key
	namerKey                      // after the key: spaces, then ':'
	namerColon                    // after ':': spaces, then the value's '"'
	namerValue                    // inside the old value: dropped up to its closing '"'
	namerEscape                   // after a '\' inside the old value
)

// modelNamer rewrites the value of every "model" string in an answer to
// the alias the client asked for, chunk by chunk, without parsing the JSON:
// a quote inside a JSON string is escaped, so `"model"` followed by a colon
// and a string is a key wherever it appears raw. It holds nothing back
// across chunks: the key and the colon pass as they are, the new value is
// written where the old one opens and the old one's bytes are dropped up to
// its closing quote, in whichever chunk that comes. A chunk without a
// match passes untouched (no copy, no body mutation). It is reused across
// the pooled stream's requests (reset).
type modelNamer struct {
	alias   []byte // the alias as a JSON string, quotes included
	state   namerState
	keyPart int    // bytes of modelKey matched at the last chunk's end
	out     []byte // the last changed Write's result
}

func (m *modelNamer) reset(alias string) {
	m.alias = jsonstr.Append(m.alias[:0], alias)
	m.state, m.keyPart = namerScan, 0
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
			if m.keyPart > 0 {
				// The key was cut by the last chunk's end: does it go on?
				rest := modelKey[m.keyPart:]
				n := min(len(rest), len(chunk)-i)
				if !bytes.Equal(chunk[i:i+n], rest[:n]) {
					m.keyPart = 0 // not the key; scan these bytes afresh
					continue
				}
				i += n
				if m.keyPart += n; m.keyPart == len(modelKey) {
					m.keyPart, m.state = 0, namerKey
				}
				continue
			}
			k := bytes.Index(chunk[i:], modelKey)
			if k < 0 {
				m.keyPart = keyPrefixAtEnd(chunk[i:])
				i = len(chunk)
				continue
			}
			i += k + len(modelKey)
			m.state = namerKey
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
				m.state = namerScan // not a string value: leave it
			}
		case namerValue:
			k := bytes.IndexAny(chunk[i:], `"\`)
			if k < 0 {
				i = len(chunk)
				continue
			}
			i += k + 1
			if chunk[i-1] == '"' {
				m.state = namerScan
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

// keyPrefixAtEnd is the length of the longest end of data that is a proper
// start of `"model"` (0: none).
func keyPrefixAtEnd(data []byte) int {
	for n := min(len(modelKey)-1, len(data)); n > 0; n-- {
		if bytes.Equal(data[len(data)-n:], modelKey[:n]) {
			return n
		}
	}
	return 0
}
