package usage

import (
	"bytes"
	"io"

	"github.com/swarmgate/swarmgate/internal/jsonscan"
	"github.com/swarmgate/swarmgate/internal/sse"
)

// MaxEventBytes caps the bytes held for one event (its data and partial
// line). A larger event is dropped and counted, never buffered further.
const MaxEventBytes = sse.MaxEventBytes

// StreamParser reads usage and delivered content from an SSE response
// (OpenAI-style chat/completions streams, and responses-API events) fed in
// arbitrary chunks. It keeps only the current partial event, at most
// sse.MaxEventBytes. The zero value is ready; Reset makes it reusable (pool
// it). Not safe for concurrent use.
type StreamParser struct {
	ev      sse.Events       // the stream's framing
	isError bool             // the current event is named "error"
	scan    jsonscan.Scanner // reads each event's JSON

	events    int
	bad       int
	done      bool
	usage     Usage
	fields    usageFields // usage as spelled, for message_delta to merge into
	hasUsage  bool
	opening   bool // usage is message_start's: its output count is not the answer's
	delivered int64
	err       error
	respID    []byte // the Responses API's response.id, first seen
}

// Reset clears all state and keeps the buffers.
func (p *StreamParser) Reset() {
	ev := p.ev
	ev.Reset()
	*p = StreamParser{ev: ev, respID: p.respID[:0]}
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

// Provisional reports whether the usage seen so far is only a stream's
// opening count: Anthropic's message_start states the prompt but an output
// of about 1 token, and the answer's output count comes in message_delta
// near the end. A stream cut or failed before that reported its prompt
// only; what it delivered tells its output (extproc).
func (p *StreamParser) Provisional() bool { return p.hasUsage && p.opening }

// Done reports whether the stream's last event was seen: chat's
// "data: [DONE]", Anthropic's message_stop, or the Responses API's
// response.completed, response.incomplete or response.failed.
func (p *StreamParser) Done() bool { return p.done }

// Events counts dispatched events that carried data.
func (p *StreamParser) Events() int { return p.events }

// BadEvents counts events dropped as malformed JSON or over
// sse.MaxEventBytes.
func (p *StreamParser) BadEvents() int { return p.bad + p.ev.Dropped() }

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
	p.ev.DropLarge, p.ev.KeepEnds = true, true
	_ = p.ev.Feed(chunk, false, p.dispatch)
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
	p.ev.DropLarge, p.ev.KeepEnds = true, true
	_ = p.ev.Feed(nil, true, p.dispatch)
}

func (p *StreamParser) dispatch(e sse.Event) error {
	p.events++
	p.isError = string(e.Name) == "error"
	if e.Cut {
		p.cutEvent(e.Data, e.Tail)
		return nil
	}
	p.event(e.Data)
	return nil
}

// cutEvent reads an event too large to hold (sse.MaxEventBytes) from its
// two ends. The Responses API's last event restates the whole answer, so
// a long one passes the cap: its usage closes the response object (its
// last member or nearly), which the tail holds, and its type leads the
// event (or follows the response, keys sorted). Dropped, a long answer was
// billed as an estimate and, its end unseen, as cut when the client closed
// on it. Any other cut event is bad.
func (p *StreamParser) cutEvent(head, tail []byte) {
	var trailing []byte
	f, ok, proven := fieldsFromTail(bytes.TrimSpace(tail), 2, &trailing)
	typ := leadingType(&p.scan, head)
	if typ == nil {
		typ = trailing
	}
	switch string(typ) {
	case "response.completed", "response.incomplete", "response.failed":
	default:
		p.bad++
		return
	}
	p.done = true
	if proven && ok {
		p.fields, p.usage, p.hasUsage, p.opening = f, f.usage(), true, false
	}
}

// leadingType is the string value of an event's "type" member read from
// the event's first bytes: found when only scalar members precede it (nil
// otherwise).
func leadingType(s *jsonscan.Scanner, head []byte) []byte {
	s.Reset(head)
	if s.Peek() != '{' {
		return nil
	}
	var typ []byte
	_ = s.Object(func(k []byte, esc bool) error {
		if !jsonscan.KeyIs(k, esc, "type") {
			if c := s.Peek(); c == '{' || c == '[' {
				return errShape // the rest of the event may be cut off
			}
			return s.Skip()
		}
		if s.Peek() == '"' {
			typ, _, _ = s.Str(nil)
		}
		return errShape // found: stop
	})
	return typ
}

var doneMarker = []byte("[DONE]")

// event interprets the data of one event.
func (p *StreamParser) event(d []byte) {
	d = bytes.TrimSpace(d)
	if bytes.Equal(d, doneMarker) {
		p.done = true
		return
	}
	e := eventScan{p: p}
	s := &p.scan
	s.Reset(d)
	if s.Peek() != '{' {
		if p.isError {
			p.setErr(&StreamError{Event: "error", Message: clip(d)})
			return
		}
		p.bad++
		return
	}
	if err := s.Object(e.member); err != nil {
		p.bad++
		return
	}
	e.apply()
}

// eventScan is what one event's JSON says.
type eventScan struct {
	p         *StreamParser
	f         usageFields
	hasU      bool
	opening   bool // the usage is message_start's message.usage
	delta     bool // the event is Anthropic's message_delta
	delivered int64
	errSeen   bool
	msg, typ  []byte
	code      []byte
}

// member reads one top-level member of an event.
func (e *eventScan) member(k []byte, esc bool) error {
	s := &e.p.scan
	if esc { // buf only then: zeroing it costs
		var buf [jsonscan.MaxKey]byte
		k = jsonscan.DecodeKey(&buf, k)
	}
	switch string(k) {
	case "usage":
		if s.Peek() == '{' {
			return e.usage(s)
		}
	case "choices":
		return s.Objects(func(k []byte, esc bool) error { return choice(s, &e.delivered, k, esc) })
	case "delta":
		switch s.Peek() {
		case '"': // responses API: {"type":"response.output_text.delta","delta":"..."}
			return text(s, &e.delivered)
		case '{': // Anthropic content_block_delta: text, partial_json, thinking
			return texts(s, &e.delivered, "text", "partial_json", "thinking")
		}
	case "response": // responses API: response.completed carries response.usage
		if s.Peek() == '{' {
			return s.Object(e.response)
		}
	case "error":
		return e.errorValue(s)
	case "type":
		return e.typeValue(s)
	case "message":
		if s.Peek() == '{' { // Anthropic message_start: {"message":{...,"usage":{...}}}
			return s.Object(func(k []byte, esc bool) error {
				if jsonscan.KeyIs(k, esc, "usage") && s.Peek() == '{' {
					err := e.usage(s)
					e.opening = true
					return err
				}
				return s.Skip()
			})
		}
		return e.topLevelError(s, &e.msg)
	case "code":
		return e.topLevelError(s, &e.code)
	}
	return s.Skip()
}

func (e *eventScan) usage(s *jsonscan.Scanner) error {
	var err error
	e.f, e.hasU, err = parseFields(s)
	e.opening = false
	return err
}

// response reads a member of a Responses API event's "response" object.
func (e *eventScan) response(k []byte, esc bool) error {
	s, p := &e.p.scan, e.p
	switch {
	case jsonscan.KeyIs(k, esc, "usage") && s.Peek() == '{':
		return e.usage(s)
	case jsonscan.KeyIs(k, esc, "id") && len(p.respID) == 0 && s.Peek() == '"':
		raw, _, err := s.Str(nil)
		if len(raw) <= MaxResponseIDBytes {
			p.respID = append(p.respID[:0], raw...)
		}
		return err
	}
	return s.Skip()
}

// errorValue reads "error": an object with message, type and code, or a
// string; null is no error.
func (e *eventScan) errorValue(s *jsonscan.Scanner) error {
	e.errSeen = true
	switch s.Peek() {
	case '"':
		var err error
		e.msg, _, err = s.Str(nil)
		return err
	case 'n':
		e.errSeen = false
		return s.Skip()
	case '{':
	default:
		return s.Skip()
	}
	return s.Object(func(k []byte, esc bool) error {
		switch {
		case jsonscan.KeyIs(k, esc, "message"):
			return stringOrSkip(s, &e.msg)
		case jsonscan.KeyIs(k, esc, "type"):
			return stringOrSkip(s, &e.typ)
		case jsonscan.KeyIs(k, esc, "code"):
			if c := s.Peek(); c == '-' || (c >= '0' && c <= '9') {
				var err error
				e.code, _, err = s.Number()
				return err
			}
			return stringOrSkip(s, &e.code)
		}
		return s.Skip()
	})
}

// typeValue reads "type": an error, or the stream's last event.
func (e *eventScan) typeValue(s *jsonscan.Scanner) error {
	var raw []byte
	if err := stringOrSkip(s, &raw); err != nil {
		return err
	}
	switch string(raw) {
	case "error":
		e.errSeen = true
	case "message_delta":
		e.delta = true
	case "message_stop", "response.completed", "response.incomplete", "response.failed":
		e.p.done = true // the stream's last event
	}
	return nil
}

// topLevelError reads the message or code that Responses API error events
// carry at top level.
func (e *eventScan) topLevelError(s *jsonscan.Scanner, dst *[]byte) error {
	if !e.p.isError && !e.errSeen {
		return s.Skip()
	}
	return stringOrSkip(s, dst)
}

// apply records what the event said.
func (e *eventScan) apply() {
	p := e.p
	if e.hasU {
		f := e.f
		if p.hasUsage && (e.delta || !f.hasInput()) {
			// Anthropic's message_delta restates some counts (the
			// cumulative output, at times the input but not the cache
			// counts): merged count by count, as its SDK does, so what
			// message_start counted and the delta leaves out stands.
			f = p.fields.merge(f)
		}
		p.fields, p.usage, p.hasUsage, p.opening = f, f.usage(), true, e.opening
	}
	p.delivered += e.delivered
	if e.errSeen || p.isError {
		ev := ""
		if p.isError {
			ev = "error"
		}
		p.setErr(&StreamError{Event: ev, Message: clip(e.msg), Type: clip(e.typ), Code: clip(e.code)})
	}
}

func (p *StreamParser) setErr(e *StreamError) {
	if p.err == nil {
		p.err = e
	}
}

// stringOrSkip reads a string's raw body into *dst, or skips a non-string.
func stringOrSkip(s *jsonscan.Scanner, dst *[]byte) error {
	if s.Peek() != '"' {
		return s.Skip()
	}
	var err error
	*dst, _, err = s.Str(nil)
	return err
}

// text adds a string's decoded size to *n; a non-string is skipped.
func text(s *jsonscan.Scanner, n *int64) error {
	if s.Peek() != '"' {
		return s.Skip()
	}
	var st jsonscan.TextStats
	_, _, err := s.Str(&st)
	*n += int64(st.Bytes)
	return err
}

// texts reads an object, adding the decoded size of the named string
// members to *n.
func texts(s *jsonscan.Scanner, n *int64, names ...string) error {
	return s.Object(func(k []byte, esc bool) error {
		for _, name := range names {
			if jsonscan.KeyIs(k, esc, name) {
				return text(s, n)
			}
		}
		return s.Skip()
	})
}

// choice reads a member of a choices[] element, adding its delivered
// bytes to *n.
func choice(s *jsonscan.Scanner, n *int64, k []byte, esc bool) error {
	switch {
	case jsonscan.KeyIs(k, esc, "delta") && s.Peek() == '{':
		return delta(s, n)
	case jsonscan.KeyIs(k, esc, "text"): // completions stream
		return text(s, n)
	}
	return s.Skip()
}

// delta reads a chat delta: its text, reasoning, refusal and the
// arguments of its tool and function calls.
func delta(s *jsonscan.Scanner, n *int64) error {
	args := func() error { // {"name":..,"arguments":".."}
		if s.Peek() != '{' {
			return s.Skip()
		}
		return texts(s, n, "arguments")
	}
	return s.Object(func(k []byte, esc bool) error {
		if esc { // buf only then: zeroing it costs
			var buf [jsonscan.MaxKey]byte
			k = jsonscan.DecodeKey(&buf, k)
		}
		switch string(k) {
		case "content", "reasoning_content", "reasoning", "refusal":
			return text(s, n)
		case "function_call":
			return args()
		case "tool_calls":
			return s.Objects(func(k []byte, esc bool) error {
				if jsonscan.KeyIs(k, esc, "function") {
					return args()
				}
				return s.Skip()
			})
		}
		return s.Skip()
	})
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
