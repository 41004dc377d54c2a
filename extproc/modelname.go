package extproc

import (
	"bytes"

	"github.com/swarmgate/swarmgate/internal/jsonstr"
)

// modelKey is the JSON key whose string value names the model in every
// family's answer: chat completions and their chunks, Responses objects and
// events, Anthropic messages and message_start.
var modelKey = []byte(`"model"`)

// maxModelHold bounds what a chunk's end may hold back while a "model"
// value is cut across chunks; a longer value passes unchanged.
const maxModelHold = 512

// modelNamer rewrites the value of every "model" string in an answer to
// the alias the client asked for, chunk by chunk, without parsing the JSON:
// a quote inside a JSON string is escaped, so `"model"` followed by a colon
// and a string is a key wherever it appears raw. A match cut at a chunk's
// end is held back until the next chunk (at most maxModelHold bytes). It is
// reused across the pooled stream's requests (reset).
type modelNamer struct {
	alias   []byte // the alias as a JSON string, quotes included
	pending []byte // a possible match held back from the last chunk
	out     []byte // the last Write's result
	joined  []byte // pending+chunk, when something was held back
}

func (m *modelNamer) reset(alias string) {
	m.alias = jsonstr.Append(m.alias[:0], alias)
	m.pending = m.pending[:0]
}

// Write returns the chunk with the model renamed, and whether it differs
// from the chunk as given (changed: the bytes must replace the chunk). At
// end nothing is held back.
func (m *modelNamer) Write(chunk []byte, end bool) (out []byte, changed bool) {
	data := chunk
	if len(m.pending) > 0 {
		m.joined = append(append(m.joined[:0], m.pending...), chunk...)
		data, changed = m.joined, true
		m.pending = m.pending[:0]
	}
	out = m.out[:0]
	last := 0 // data[last:] is not written yet
	for i := 0; ; {
		k := bytes.Index(data[i:], modelKey)
		if k < 0 {
			break
		}
		k += i
		start, stop, complete := stringValue(data, k+len(modelKey))
		switch {
		case !complete && !end && len(data)-k <= maxModelHold:
			// Cut by the chunk's end: hold it back for the next one.
			out = append(out, data[last:k]...)
			m.pending = append(m.pending, data[k:]...)
			m.out = out
			return out, true
		case start < 0 || !complete:
			i = k + len(modelKey) // not a string value: leave it
			continue
		}
		out = append(out, data[last:start]...)
		out = append(out, m.alias...)
		last, i = stop, stop
		changed = true
	}
	if !end {
		// A key cut inside `"model"` itself: hold the possible start.
		if h := keyPrefixAtEnd(data[last:]); h > 0 {
			out = append(out, data[last:len(data)-h]...)
			m.pending = append(m.pending, data[len(data)-h:]...)
			m.out = out
			return out, true
		}
	}
	if !changed {
		return chunk, false
	}
	out = append(out, data[last:]...)
	m.out = out
	return out, true
}

// stringValue reads `<ws>:<ws>"…"` at data[i:]: start is the opening quote
// and stop just past the closing one. start < 0 when what follows the key
// is not a string value; complete is false when data ends first.
func stringValue(data []byte, i int) (start, stop int, complete bool) {
	i = skipSpace(data, i)
	if i == len(data) {
		return 0, 0, false
	}
	if data[i] != ':' {
		return -1, 0, true
	}
	i = skipSpace(data, i+1)
	if i == len(data) {
		return 0, 0, false
	}
	if data[i] != '"' {
		return -1, 0, true
	}
	start = i
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return start, i + 1, true
		}
	}
	return 0, 0, false
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
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
