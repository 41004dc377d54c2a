package usage

import (
	"bytes"
	"io"
)

// StreamParser reads usage and delivered content from an SSE response
// (OpenAI-style chat/completions streams, and responses-API events) fed in
// arbitrary chunks. It keeps only the current partial event, at most
// MaxEventBytes. The zero value is ready; Reset makes it reusable (pool it).
// Not safe for concurrent use.
type StreamParser struct {
	line     []byte // partial line carried across Writes
	data     []byte // data of the current event, copied
	dataRef  []byte // data of the current event, still in the caller's chunk
	hasData  bool
	isError  bool // event: error
	discard  bool // event over the cap: skip to its blank line
	afterCR  bool // last byte seen was a CR terminator
	longLine bool // current partial line over the cap: skip to its end

	events    int
	bad       int
	done      bool
	usage     Usage
	hasUsage  bool
	delivered int64
	err       error
	respID    []byte // the Responses API's response.id, first seen
}

// Reset clears all state and keeps the buffers.
func (p *StreamParser) Reset() {
	*p = StreamParser{line: p.line[:0], data: p.data[:0], respID: p.respID[:0]}
}

// ResponseID is the id of the Responses API response the stream carries
// (the response.created / response.completed events' response.id, raw
// JSON string body); nil when none was seen. Valid until Reset.
func (p *StreamParser) ResponseID() []byte {
	if len(p.respID) == 0 {
		return nil
	}
	return p.respID
}

// Usage returns the last usage object seen in the stream.
func (p *StreamParser) Usage() (Usage, bool) { return p.usage, p.hasUsage }

// Done reports whether the stream's last event was seen: chat's
// "data: [DONE]", Anthropic's message_stop, or the Responses API's
// response.completed, response.incomplete or response.failed.
func (p *StreamParser) Done() bool { return p.done }

// Events counts dispatched events that carried data.
func (p *StreamParser) Events() int { return p.events }

// BadEvents counts events dropped as malformed JSON or over MaxEventBytes.
func (p *StreamParser) BadEvents() int { return p.bad }

// DeliveredContentBytes is the decoded size of the text delivered to the
// client: choices[].delta.content, .reasoning_content, .reasoning, .refusal,
// tool-call and function-call arguments, choices[].text (completions) and
// responses-API "delta" strings. It prices what was delivered when the
// provider reports no usage (e.g. a stream cut short).
func (p *StreamParser) DeliveredContentBytes() int64 { return p.delivered }

// Err returns the first error the stream reported (an "error" event or an
// event whose JSON has an "error" member), as a *StreamError; nil if none.
func (p *StreamParser) Err() error { return p.err }

// Write consumes the next chunk. It never fails: malformed events are
// counted (BadEvents) and skipped. It does not retain chunk.
func (p *StreamParser) Write(chunk []byte) {
	b := chunk
	if p.afterCR && len(b) > 0 {
		p.afterCR = false
		if b[0] == '\n' {
			b = b[1:]
		}
	}
	for len(b) > 0 {
		j := nextTerminator(b)
		if j < 0 {
			p.partial(b)
			break
		}
		if len(p.line) > 0 || p.longLine {
			if !p.longLine {
				p.line = append(p.line, b[:j]...)
				p.handleLine(p.line, false)
			}
			p.line = p.line[:0]
			p.longLine = false
		} else {
			p.handleLine(b[:j], true)
		}
		next := j + 1
		if b[j] == '\r' {
			if j+1 < len(b) {
				if b[j+1] == '\n' {
					next = j + 2
				}
			} else {
				p.afterCR = true
			}
		}
		b = b[next:]
	}
	if p.dataRef != nil { // chunk goes away: keep a copy
		p.data = append(p.data[:0], p.dataRef...)
		p.dataRef = nil
	}
}

// Writer adapts the parser to io.Writer, e.g. as the output of a
// GzipStream. Its Write never fails.
func (p *StreamParser) Writer() io.Writer { return parserWriter{p} }

type parserWriter struct{ p *StreamParser }

func (w parserWriter) Write(b []byte) (int, error) {
	w.p.Write(b)
	return len(b), nil
}

// Flush dispatches an event left without its closing blank line at the end
// of the stream (browsers drop it; accounting should not lose a usage
// chunk a provider forgot to terminate).
func (p *StreamParser) Flush() {
	if len(p.line) > 0 && !p.longLine {
		p.handleLine(p.line, false)
	}
	p.line, p.longLine = p.line[:0], false
	p.handleLine(nil, false)
}

func (p *StreamParser) partial(b []byte) {
	if p.longLine {
		return
	}
	if len(p.line)+len(b)+len(p.data)+len(p.dataRef) > MaxEventBytes {
		p.overflow()
		p.longLine = true
		p.line = p.line[:0]
		return
	}
	p.line = append(p.line, b...)
}

func (p *StreamParser) overflow() {
	if !p.discard {
		p.bad++
	}
	p.discard = true
	p.resetEvent()
}

func (p *StreamParser) resetEvent() {
	p.data = p.data[:0]
	p.dataRef = nil
	p.hasData = false
	p.isError = false
}

// handleLine processes one complete line; inChunk says it lies in the
// caller's chunk (so it can be referenced instead of copied).
func (p *StreamParser) handleLine(l []byte, inChunk bool) {
	if len(l) == 0 {
		if p.discard {
			p.discard = false
			p.resetEvent()
			return
		}
		p.dispatch()
		return
	}
	if p.discard || l[0] == ':' {
		return
	}
	f, v := splitField(l)
	switch string(f) {
	case "data":
		if len(v) > MaxEventBytes {
			p.overflow()
			return
		}
		if !p.hasData {
			p.hasData = true
			if inChunk {
				p.dataRef = v
			} else {
				p.data = append(p.data[:0], v...)
			}
			return
		}
		if p.dataRef != nil {
			p.data = append(p.data[:0], p.dataRef...)
			p.dataRef = nil
		}
		if len(p.data)+1+len(v) > MaxEventBytes {
			p.overflow()
			return
		}
		p.data = append(p.data, '\n')
		p.data = append(p.data, v...)
	case "event":
		p.isError = string(v) == "error"
	}
}

func (p *StreamParser) dispatch() {
	if !p.hasData {
		p.resetEvent()
		return
	}
	d := p.data
	if p.dataRef != nil {
		d = p.dataRef
	}
	p.events++
	p.event(d)
	p.resetEvent()
}

var doneMarker = []byte("[DONE]")

// event interprets the data of one event.
func (p *StreamParser) event(d []byte) {
	d = bytes.TrimSpace(d)
	if bytes.Equal(d, doneMarker) {
		p.done = true
		return
	}
	s := jscan{b: d}
	if s.peek() != '{' {
		if p.isError {
			p.setErr(&StreamError{Event: "error", Message: clip(d)})
			return
		}
		p.bad++
		return
	}
	var (
		u         Usage
		hasU      bool
		hasInput  bool
		delivered int64
		errSeen   bool
		msg, typ  []byte
		code      []byte
	)
	s.object(func(k []byte) {
		switch string(k) {
		case "usage":
			if s.peek() == '{' {
				u, hasInput, hasU = parseUsageInput(&s)
				return
			}
		case "choices":
			if s.peek() == '[' {
				s.array(func() { delivered += choice(&s) })
				return
			}
		case "delta":
			switch s.peek() {
			case '"': // responses API: {"type":"response.output_text.delta","delta":"..."}
				delivered += int64(decodedLen(s.str()))
			case '{': // Anthropic content_block_delta: text, partial_json, thinking
				delivered += anthropicDelta(&s)
			default:
				s.skip()
			}
			return
		case "response": // responses API: response.completed carries response.usage
			if s.peek() == '{' {
				s.object(func(k []byte) {
					switch {
					case string(k) == "usage" && s.peek() == '{':
						u, hasInput, hasU = parseUsageInput(&s)
						return
					case string(k) == "id" && len(p.respID) == 0:
						if raw, ok := s.stringValue(); ok && len(raw) <= MaxResponseIDBytes {
							p.respID = append(p.respID[:0], raw...)
						}
						return
					}
					s.skip()
				})
				return
			}
		case "error":
			errSeen = true
			switch s.peek() {
			case '{':
				s.object(func(k []byte) {
					switch string(k) {
					case "message":
						msg, _ = s.stringValue()
					case "type":
						typ, _ = s.stringValue()
					case "code":
						if s.peek() == '"' {
							code = s.str()
						} else if c := s.peek(); c == '-' || (c >= '0' && c <= '9') {
							code = s.scalar()
						} else {
							s.skip()
						}
					default:
						s.skip()
					}
				})
				return
			case '"':
				msg = s.str()
				return
			case 'n':
				errSeen = false
			}
		case "type":
			if raw, ok := s.stringValue(); ok {
				switch string(raw) {
				case "error":
					errSeen = true
				case "message_stop", "response.completed", "response.incomplete", "response.failed":
					p.done = true // the stream's last event
				}
			}
			return
		case "message", "code":
			if s.peek() == '{' && string(k) == "message" {
				// Anthropic message_start: {"message":{...,"usage":{...}}}
				s.object(func(k []byte) {
					if string(k) == "usage" && s.peek() == '{' {
						u, hasInput, hasU = parseUsageInput(&s)
						return
					}
					s.skip()
				})
				return
			}
			// responses-API error events carry these at top level
			if p.isError || errSeen {
				if raw, ok := s.stringValue(); ok {
					if string(k) == "message" {
						msg = raw
					} else {
						code = raw
					}
				}
				return
			}
		}
		s.skip()
	})
	if s.bad {
		p.bad++
		return
	}
	if hasU {
		if !hasInput && p.hasUsage {
			// Anthropic's message_delta: cumulative output tokens only;
			// the prompt counted at message_start stands.
			u.PromptTokens, u.CachedTokens, u.CacheWriteTokens = p.usage.PromptTokens, p.usage.CachedTokens, p.usage.CacheWriteTokens
			if u.ReasoningTokens == 0 {
				u.ReasoningTokens = p.usage.ReasoningTokens
			}
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
		}
		p.usage, p.hasUsage = u, true
	}
	p.delivered += delivered
	if errSeen || p.isError {
		ev := ""
		if p.isError {
			ev = "error"
		}
		p.setErr(&StreamError{Event: ev, Message: clip(msg), Type: clip(typ), Code: clip(code)})
	}
}

func (p *StreamParser) setErr(e *StreamError) {
	if p.err == nil {
		p.err = e
	}
}

// choice reads one choices[] element and returns its delivered bytes.
func choice(s *jscan) int64 {
	if s.peek() != '{' {
		s.skip()
		return 0
	}
	var n int64
	s.object(func(k []byte) {
		switch string(k) {
		case "delta":
			if s.peek() == '{' {
				n += delta(s)
				return
			}
		case "text": // completions stream
			if raw, ok := s.stringValue(); ok {
				n += int64(decodedLen(raw))
			}
			return
		}
		s.skip()
	})
	return n
}

// anthropicDelta reads an Anthropic content_block_delta's delta object
// and returns its delivered bytes (text_delta, input_json_delta,
// thinking_delta).
func anthropicDelta(s *jscan) int64 {
	var n int64
	s.object(func(k []byte) {
		switch string(k) {
		case "text", "partial_json", "thinking":
			if raw, ok := s.stringValue(); ok {
				n += int64(decodedLen(raw))
			}
			return
		}
		s.skip()
	})
	return n
}

func delta(s *jscan) int64 {
	var n int64
	str := func() {
		if raw, ok := s.stringValue(); ok {
			n += int64(decodedLen(raw))
		}
	}
	args := func() { // {"name":..,"arguments":".."}
		if s.peek() != '{' {
			s.skip()
			return
		}
		s.object(func(k []byte) {
			if string(k) == "arguments" {
				str()
				return
			}
			s.skip()
		})
	}
	s.object(func(k []byte) {
		switch string(k) {
		case "content", "reasoning_content", "reasoning", "refusal":
			str()
		case "tool_calls":
			if s.peek() != '[' {
				s.skip()
				return
			}
			s.array(func() {
				if s.peek() != '{' {
					s.skip()
					return
				}
				s.object(func(k []byte) {
					if string(k) == "function" {
						args()
						return
					}
					s.skip()
				})
			})
		case "function_call":
			args()
		default:
			s.skip()
		}
	})
	return n
}

// StreamError is an error the upstream reported inside the stream. Its
// fields are copies of the provider's text, clipped to 256 bytes.
type StreamError struct {
	Event   string // "error" when it came as an SSE "event: error"
	Message string
	Type    string
	Code    string
}

func (e *StreamError) Error() string {
	msg := "upstream stream error"
	if e.Type != "" {
		msg += " (" + e.Type + ")"
	}
	if e.Code != "" {
		msg += " [" + e.Code + "]"
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

func clip(b []byte) string {
	if len(b) > 256 {
		b = b[:256]
	}
	return string(b)
}
