package translate

// Chat completions client → Anthropic Messages backend: the response half.
// A JSON answer is held to its end and rewritten whole; a stream is
// rewritten event by event into chat.completion.chunk lines, copying the
// backend's JSON string literals (text, partial_json) as they are, so a
// text delta costs one small parse and one append.

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/swarmgate/swarmgate/extproc/family"
)

func newChatMessagesResponse(o ResponseOptions) Response {
	switch {
	case o.Status >= 400:
		return newErrorResponse(o.Status, family.OpenAI)
	case o.Stream:
		s := &chatMessagesStream{o: o}
		s.onEvent = s.event
		return s
	}
	return &chatMessagesJSON{o: o}
}

// chatMessagesUsage is Anthropic's usage; pointers tell a field sent from
// one left out (a later message_delta overrides only what it sends).
type chatMessagesUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
}

// chatMessagesTokens is the usage as counted so far.
type chatMessagesTokens struct {
	input, output, cacheCreation, cacheRead int64
}

func (t *chatMessagesTokens) add(u *chatMessagesUsage) {
	if u.InputTokens != nil {
		t.input = *u.InputTokens
	}
	if u.OutputTokens != nil {
		t.output = *u.OutputTokens
	}
	if u.CacheCreationInputTokens != nil {
		t.cacheCreation = *u.CacheCreationInputTokens
	}
	if u.CacheReadInputTokens != nil {
		t.cacheRead = *u.CacheReadInputTokens
	}
}

// appendJSON writes the chat completions usage object: Anthropic counts
// cached input apart from input_tokens, OpenAI's prompt_tokens include it.
func (t *chatMessagesTokens) appendJSON(b []byte) []byte {
	prompt := t.input + t.cacheRead + t.cacheCreation
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, prompt, 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, t.output, 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, prompt+t.output, 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, t.cacheRead, 10)
	return append(b, "}}"...)
}

// chatMessagesFinish maps Anthropic's stop_reason to a finish_reason.
func chatMessagesFinish(stop string) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop" // end_turn, stop_sequence, pause_turn, and none given
}

// chatMessagesAppendString appends s as a JSON string: quotes,
// backslashes and control characters escaped, the rest (valid UTF-8, as
// every string decoded by encoding/json is) kept as it is.
func chatMessagesAppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// chatMessagesJSON holds a JSON answer to its end.
type chatMessagesJSON struct {
	o   ResponseOptions
	buf []byte
}

type chatMessagesAnswer struct {
	ID         string `json:"id"`
	Model      string `json:"model"`
	StopReason string `json:"stop_reason"`
	Content    []struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	Usage chatMessagesUsage `json:"usage"`
}

// errChatMessagesTooLarge: a JSON answer above maxBuffered.
var errChatMessagesTooLarge = errorString("translate: the backend's answer exceeds the translation buffer")

func (r *chatMessagesJSON) Write(dst, chunk []byte, end bool) ([]byte, error) {
	if len(r.buf)+len(chunk) > maxBuffered {
		return dst, errChatMessagesTooLarge
	}
	r.buf = append(r.buf, chunk...)
	if !end {
		return dst, nil
	}
	var a chatMessagesAnswer
	if err := json.Unmarshal(r.buf, &a); err != nil {
		return dst, &chatMessagesReadError{err: err}
	}
	var tokens chatMessagesTokens
	tokens.add(&a.Usage)

	b := dst
	b = append(b, `{"id":`...)
	b = chatMessagesAppendString(b, "chatcmpl-"+a.ID)
	b = append(b, `,"object":"chat.completion","created":`...)
	b = strconv.AppendInt(b, r.o.Created, 10)
	b = append(b, `,"model":`...)
	b = chatMessagesAppendString(b, a.Model)
	b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	var text []byte
	hasText := false
	for _, c := range a.Content {
		if c.Type == "text" {
			text = append(text, c.Text...)
			hasText = true
		}
	}
	if hasText {
		b = chatMessagesAppendString(b, string(text))
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"refusal":null`...)
	calls := 0
	for _, c := range a.Content {
		if c.Type != "tool_use" {
			continue // thinking and redacted_thinking are not the client's to see
		}
		if calls == 0 {
			b = append(b, `,"tool_calls":[`...)
		} else {
			b = append(b, ',')
		}
		calls++
		b = append(b, `{"id":`...)
		b = chatMessagesAppendString(b, c.ID)
		b = append(b, `,"type":"function","function":{"name":`...)
		b = chatMessagesAppendString(b, c.Name)
		b = append(b, `,"arguments":`...)
		b = chatMessagesAppendString(b, chatMessagesCompact(c.Input))
		b = append(b, "}}"...)
	}
	if calls > 0 {
		b = append(b, ']')
	}
	b = append(b, `},"logprobs":null,"finish_reason":`...)
	b = chatMessagesAppendString(b, chatMessagesFinish(a.StopReason))
	b = append(b, `}],"usage":`...)
	b = tokens.appendJSON(b)
	b = append(b, '}')
	r.buf = nil
	return b, nil
}

// chatMessagesCompact is a tool input as the compact JSON text a client
// reads as arguments ({} when the backend sent none).
func chatMessagesCompact(input json.RawMessage) string {
	if len(input) == 0 || string(input) == "null" {
		return "{}"
	}
	var buf bytes.Buffer
	if json.Compact(&buf, input) != nil {
		return "{}"
	}
	return buf.String()
}

// chatMessagesReadError is a backend body that is not Anthropic's shape.
type chatMessagesReadError struct{ err error }

func (e *chatMessagesReadError) Error() string {
	return "translate: the backend's answer is not an Anthropic message: " + e.err.Error()
}

func (e *chatMessagesReadError) Unwrap() error { return e.err }

// chatMessagesStream rewrites an Anthropic event stream.
type chatMessagesStream struct {
	o       ResponseOptions
	events  Events
	onEvent func(Event) error // s.event, bound once
	out     []byte            // dst while Feed runs

	prefix  []byte // `{"id":…,"object":"chat.completion.chunk","created":…,"model":…`
	tokens  chatMessagesTokens
	tools   []int // content block index → tool call index + 1 (0: not a tool)
	ntools  int
	started bool // message_start seen
	done    bool // message_stop or error written: nothing more is sent

	// scratch, reused per event
	ev chatMessagesEvent
}

// chatMessagesEvent is every stream event's fields this translation reads;
// strings the client gets stay raw JSON literals, copied as they are.
type chatMessagesEvent struct {
	Type    json.RawMessage `json:"type"`
	Index   int             `json:"index"`
	Message struct {
		ID    string            `json:"id"`
		Model string            `json:"model"`
		Usage chatMessagesUsage `json:"usage"`
	} `json:"message"`
	ContentBlock struct {
		Type json.RawMessage `json:"type"`
		ID   json.RawMessage `json:"id"`
		Name json.RawMessage `json:"name"`
		Text json.RawMessage `json:"text"`
	} `json:"content_block"`
	Delta struct {
		Type        json.RawMessage `json:"type"`
		Text        json.RawMessage `json:"text"`
		PartialJSON json.RawMessage `json:"partial_json"`
		StopReason  json.RawMessage `json:"stop_reason"`
	} `json:"delta"`
	Usage chatMessagesUsage `json:"usage"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func (e *chatMessagesEvent) reset() {
	e.Type = e.Type[:0]
	e.Index = 0
	e.Message.ID, e.Message.Model, e.Message.Usage = "", "", chatMessagesUsage{}
	e.ContentBlock.Type = e.ContentBlock.Type[:0]
	e.ContentBlock.ID = e.ContentBlock.ID[:0]
	e.ContentBlock.Name = e.ContentBlock.Name[:0]
	e.ContentBlock.Text = e.ContentBlock.Text[:0]
	e.Delta.Type = e.Delta.Type[:0]
	e.Delta.Text = e.Delta.Text[:0]
	e.Delta.PartialJSON = e.Delta.PartialJSON[:0]
	e.Delta.StopReason = e.Delta.StopReason[:0]
	e.Usage = chatMessagesUsage{}
	e.Error.Type, e.Error.Message = "", ""
}

// errChatMessagesCut: the backend's stream ended before message_stop.
const chatMessagesCutMessage = "the backend's stream ended before the answer was complete"

func (s *chatMessagesStream) Write(dst, chunk []byte, end bool) ([]byte, error) {
	if s.done {
		return dst, nil
	}
	s.out = dst
	err := s.events.Feed(chunk, end, s.onEvent)
	dst, s.out = s.out, nil
	if err != nil {
		return dst, err
	}
	if end && !s.done {
		// A stream cut short is an error to the client, never a clean end.
		s.done = true
		dst = s.appendError(dst, "api_error", chatMessagesCutMessage)
	}
	return dst, nil
}

// jsonString: a raw value that is a JSON string literal.
func chatMessagesIsString(raw json.RawMessage) bool {
	return len(raw) >= 2 && raw[0] == '"'
}

func (s *chatMessagesStream) event(ev Event) error {
	if s.done {
		return nil
	}
	// The event name is the type on Anthropic streams; a ping (most
	// frequent of the empty ones) is skipped before any parse.
	if string(ev.Name) == "ping" {
		return nil
	}
	e := &s.ev
	e.reset()
	if err := json.Unmarshal(ev.Data, e); err != nil {
		return &chatMessagesReadError{err: err}
	}
	switch string(e.Type) {
	case `"content_block_delta"`:
		return s.delta(e)
	case `"message_start"`:
		s.start(e.Message.ID, e.Message.Model)
		s.tokens.add(&e.Message.Usage)
		s.out = s.appendChunkOpen(s.out)
		s.out = append(s.out, `{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`...)
		s.out = append(s.out, "\n\n"...)
	case `"content_block_start"`:
		s.blockStart(e)
	case `"message_delta"`:
		s.start("", "")
		s.tokens.add(&e.Usage)
		var stop string
		_ = json.Unmarshal(e.Delta.StopReason, &stop)
		s.out = s.appendChunkOpen(s.out)
		s.out = append(s.out, `{},"logprobs":null,"finish_reason":`...)
		s.out = chatMessagesAppendString(s.out, chatMessagesFinish(stop))
		s.out = append(s.out, "}]}\n\n"...)
	case `"message_stop"`:
		s.start("", "")
		if s.o.IncludeUsage {
			s.out = append(s.out, "data: "...)
			s.out = append(s.out, s.prefix...)
			s.out = append(s.out, `,"choices":[],"usage":`...)
			s.out = s.tokens.appendJSON(s.out)
			s.out = append(s.out, "}\n\n"...)
		}
		s.out = append(s.out, "data: [DONE]\n\n"...)
		s.done = true
	case `"error"`:
		typ := e.Error.Type
		if typ == "" {
			typ = "api_error"
		}
		msg := e.Error.Message
		if msg == "" {
			msg = string(ev.Data)
		}
		s.out = s.appendError(s.out, typ, msg)
		s.done = true
	}
	// content_block_stop, ping and unknown types carry nothing for the client.
	return nil
}

// start sets the chunk prefix from message_start (or, if a stream skipped
// it, from the gateway's request id).
func (s *chatMessagesStream) start(id, model string) {
	if s.started {
		return
	}
	s.started = true
	if id == "" {
		id = s.o.RequestID
	}
	b := append(s.prefix[:0], `{"id":`...)
	b = chatMessagesAppendString(b, "chatcmpl-"+id)
	b = append(b, `,"object":"chat.completion.chunk","created":`...)
	b = strconv.AppendInt(b, s.o.Created, 10)
	b = append(b, `,"model":`...)
	b = chatMessagesAppendString(b, model)
	s.prefix = b
}

// appendChunkOpen writes a chunk up to its delta's value.
func (s *chatMessagesStream) appendChunkOpen(b []byte) []byte {
	b = append(b, "data: "...)
	b = append(b, s.prefix...)
	return append(b, `,"choices":[{"index":0,"delta":`...)
}

func (s *chatMessagesStream) delta(e *chatMessagesEvent) error {
	s.start("", "")
	switch string(e.Delta.Type) {
	case `"text_delta"`:
		if !chatMessagesIsString(e.Delta.Text) || len(e.Delta.Text) == 2 {
			return nil
		}
		s.out = s.appendChunkOpen(s.out)
		s.out = append(s.out, `{"content":`...)
		s.out = append(s.out, e.Delta.Text...)
		s.out = append(s.out, `},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	case `"input_json_delta"`:
		if e.Index < 0 || e.Index >= len(s.tools) || s.tools[e.Index] == 0 {
			return nil
		}
		if !chatMessagesIsString(e.Delta.PartialJSON) || len(e.Delta.PartialJSON) == 2 {
			return nil
		}
		s.out = s.appendChunkOpen(s.out)
		s.out = append(s.out, `{"tool_calls":[{"index":`...)
		s.out = strconv.AppendInt(s.out, int64(s.tools[e.Index]-1), 10)
		s.out = append(s.out, `,"function":{"arguments":`...)
		s.out = append(s.out, e.Delta.PartialJSON...)
		s.out = append(s.out, `}}]},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	}
	// thinking_delta, signature_delta, citations_delta: not the client's.
	return nil
}

// chatMessagesMaxBlocks bounds the content block index a stream may name
// (the index table grows to it).
const chatMessagesMaxBlocks = 4096

func (s *chatMessagesStream) blockStart(e *chatMessagesEvent) {
	s.start("", "")
	switch string(e.ContentBlock.Type) {
	case `"tool_use"`:
		if e.Index < 0 || e.Index >= chatMessagesMaxBlocks {
			return
		}
		for len(s.tools) <= e.Index {
			s.tools = append(s.tools, 0)
		}
		s.ntools++
		s.tools[e.Index] = s.ntools
		s.out = s.appendChunkOpen(s.out)
		s.out = append(s.out, `{"tool_calls":[{"index":`...)
		s.out = strconv.AppendInt(s.out, int64(s.ntools-1), 10)
		s.out = append(s.out, `,"id":`...)
		s.out = chatMessagesAppendRawString(s.out, e.ContentBlock.ID)
		s.out = append(s.out, `,"type":"function","function":{"name":`...)
		s.out = chatMessagesAppendRawString(s.out, e.ContentBlock.Name)
		s.out = append(s.out, `,"arguments":""}}]},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	case `"text"`:
		// A text block starts empty; were it not, its text comes first.
		if chatMessagesIsString(e.ContentBlock.Text) && len(e.ContentBlock.Text) > 2 {
			s.out = s.appendChunkOpen(s.out)
			s.out = append(s.out, `{"content":`...)
			s.out = append(s.out, e.ContentBlock.Text...)
			s.out = append(s.out, `},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
		}
	}
	// thinking, redacted_thinking, server tool blocks: not the client's.
}

// chatMessagesAppendRawString appends a raw JSON string literal, or ""
// when the value is not a string.
func chatMessagesAppendRawString(b []byte, raw json.RawMessage) []byte {
	if !chatMessagesIsString(raw) {
		return append(b, `""`...)
	}
	return append(b, raw...)
}

// appendError writes an error event the way OpenAI streams one: a data
// line with an error object, after which the client reads nothing more.
func (s *chatMessagesStream) appendError(b []byte, typ, msg string) []byte {
	_, body := family.OpenAI.Render(&family.Error{Message: msg, Type: typ})
	b = append(b, "data: "...)
	b = append(b, body...)
	return append(b, "\n\n"...)
}
