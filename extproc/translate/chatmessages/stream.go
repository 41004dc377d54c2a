package chatmessages

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/jsonstr"
)

// sseResponse rewrites an Anthropic Messages event stream into chat
// completions chunks. Each event is read and checked in place in one pass
// (scan.go): the text and partial JSON the client gets are
// the backend's string literals, copied as they are.
type sseResponse struct {
	o       translate.ResponseOptions
	events  translate.Events
	onEvent func(translate.Event) error // s.event, bound once
	out     []byte                      // dst while Feed runs

	prefix  []byte // `{"id":…,"object":"chat.completion.chunk","created":…,"model":…`
	tokens  tokenCounts
	tools   []toolBlock // by content block index
	inputs  []byte      // the non-empty content_block_start inputs, as JSON strings
	ntools  int
	started bool // the prefix is set
	done    bool // message_stop or an error written: nothing more is sent
	ended   bool // data: [DONE] written: the client has the whole answer
}

// toolBlock is what a stream keeps of a content block that may be a tool
// call.
type toolBlock struct {
	call int  // the tool call index + 1 (0: not a tool call)
	sent bool // argument bytes were sent
	// input is the block's content_block_start input, inputs[input[0]:input[1]]
	// (empty for {}): the arguments when no input_json_delta follows.
	input [2]int
}

// streamEvent is what one stream event holds for the client, as raw
// JSON values (nil when absent).
type streamEvent struct {
	typ, index, message, block, delta, usage, err []byte
}

// read takes an event's members; false when data is not one valid JSON
// object.
func (e *streamEvent) read(data []byte) bool {
	*e = streamEvent{}
	m := chatMessagesMembers{b: data}
	for m.next() {
		switch string(m.key) {
		case "type":
			e.typ = m.val
		case "index":
			e.index = m.val
		case "message":
			e.message = m.val
		case "content_block":
			e.block = m.val
		case "delta":
			e.delta = m.val
		case "usage":
			e.usage = m.val
		case "error":
			e.err = m.val
		}
	}
	return m.ok()
}

// cutMessage: the backend's stream ended before message_stop.
const cutMessage = "the backend's stream ended before the answer was complete"

// Done: data: [DONE] was written (at the backend's message_stop); an
// error ends the client's stream without it.
func (s *sseResponse) Done() bool { return s.ended }

func (s *sseResponse) Write(dst, chunk []byte, end bool) ([]byte, error) {
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
		dst = s.appendError(dst, "api_error", cutMessage)
	}
	return dst, nil
}

func (s *sseResponse) event(ev translate.Event) error {
	if s.done || string(ev.Name) == "ping" {
		return nil
	}
	var e streamEvent
	if !e.read(ev.Data) {
		return &readError{err: errors.New("an event's data is not a JSON object: " + clip(ev.Data))}
	}
	switch string(e.typ) {
	case `"content_block_delta"`:
		s.delta(&e)
	case `"message_start"`:
		s.messageStart(e.message)
	case `"content_block_start"`:
		s.blockStart(&e)
	case `"content_block_stop"`:
		if index, ok := chatMessagesInt(e.index); ok && index < int64(len(s.tools)) {
			s.endArguments(&s.tools[index])
		}
	case `"message_delta"`:
		s.start(nil, nil)
		for i := range s.tools { // a backend that left a block unstopped
			s.endArguments(&s.tools[i])
		}
		s.tokens.read(e.usage)
		var stop []byte
		for m := (chatMessagesMembers{b: e.delta}); m.next(); {
			if string(m.key) == "stop_reason" {
				stop = m.val
			}
		}
		if len(stop) >= 2 && stop[0] == '"' {
			stop = stop[1 : len(stop)-1]
		}
		s.out = s.appendChunkOpen(s.out)
		s.out = append(s.out, `{},"logprobs":null,"finish_reason":"`...)
		s.out = append(s.out, finishReason(string(stop))...)
		s.out = append(s.out, "\"}]}\n\n"...)
	case `"message_stop"`:
		s.start(nil, nil)
		if s.o.IncludeUsage {
			s.out = append(s.out, "data: "...)
			s.out = append(s.out, s.prefix...)
			s.out = append(s.out, `,"choices":[],"usage":`...)
			s.out = s.tokens.appendJSON(s.out)
			s.out = append(s.out, "}\n\n"...)
		}
		s.out = append(s.out, "data: [DONE]\n\n"...)
		s.done, s.ended = true, true
	case `"error"`:
		var v struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(e.err, &v)
		if v.Type == "" {
			v.Type = "api_error"
		}
		if v.Message == "" {
			v.Message = clip(ev.Data)
		}
		s.out = s.appendError(s.out, v.Type, v.Message)
		s.done = true
	}
	// ping and unknown types carry nothing for the client.
	return nil
}

func clip(b []byte) string {
	if len(b) > 256 {
		b = b[:256]
	}
	return string(b)
}

// read takes the usage fields an event sends (numbers; null or absent
// fields keep what an earlier event said).
func (t *tokenCounts) read(usage []byte) {
	for m := (chatMessagesMembers{b: usage}); m.next(); {
		n, ok := chatMessagesInt(m.val)
		if !ok {
			continue
		}
		switch string(m.key) {
		case "input_tokens":
			t.input = n
		case "output_tokens":
			t.output = n
		case "cache_creation_input_tokens":
			t.cacheCreation = n
		case "cache_read_input_tokens":
			t.cacheRead = n
		}
	}
}

func (s *sseResponse) messageStart(msg []byte) {
	var id, model, usage []byte
	for m := (chatMessagesMembers{b: msg}); m.next(); {
		switch string(m.key) {
		case "id":
			id = m.val
		case "model":
			model = m.val
		case "usage":
			usage = m.val
		}
	}
	s.start(id, model)
	s.tokens.read(usage)
	s.out = s.appendChunkOpen(s.out)
	s.out = append(s.out, `{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

// start sets the chunk prefix from message_start's raw id and model (or,
// if a stream skipped it, from the gateway's request id).
func (s *sseResponse) start(id, model []byte) {
	if s.started {
		return
	}
	s.started = true
	b := append(s.prefix[:0], `{"id":`...)
	if chatMessagesIsString(id) {
		b = append(b, `"chatcmpl-`...)
		b = append(b, id[1:]...)
	} else {
		b = jsonstr.Append(b, "chatcmpl-"+s.o.RequestID)
	}
	b = append(b, `,"object":"chat.completion.chunk","created":`...)
	b = strconv.AppendInt(b, s.o.Created, 10)
	b = append(b, `,"model":`...)
	if chatMessagesIsString(model) {
		b = append(b, model...)
	} else {
		b = append(b, `""`...)
	}
	s.prefix = b
}

// appendChunkOpen writes a chunk up to its delta's value.
func (s *sseResponse) appendChunkOpen(b []byte) []byte {
	b = append(b, "data: "...)
	b = append(b, s.prefix...)
	return append(b, `,"choices":[{"index":0,"delta":`...)
}

// chunkClose ends a chunk whose delta is open one level deep.
const chunkClose = `},"logprobs":null,"finish_reason":null}]}` + "\n\n"

func (s *sseResponse) delta(e *streamEvent) {
	s.start(nil, nil)
	var typ, text, partial []byte
	for m := (chatMessagesMembers{b: e.delta}); m.next(); {
		switch string(m.key) {
		case "type":
			typ = m.val
		case "text":
			text = m.val
		case "partial_json":
			partial = m.val
		}
	}
	switch string(typ) {
	case `"text_delta"`:
		if len(text) <= 2 || !chatMessagesIsString(text) {
			return
		}
		s.out = s.appendChunkOpen(s.out)
		s.out = append(s.out, `{"content":`...)
		s.out = append(s.out, text...)
		s.out = append(s.out, chunkClose...)
	case `"input_json_delta"`:
		index, ok := chatMessagesInt(e.index)
		if !ok || index >= int64(len(s.tools)) || s.tools[index].call == 0 {
			return
		}
		if len(partial) <= 2 || !chatMessagesIsString(partial) {
			return
		}
		s.tools[index].sent = true
		s.appendArguments(s.tools[index].call, partial)
	}
	// thinking_delta, signature_delta, citations_delta: not the client's.
}

// maxBlocks bounds the content block index a stream may name
// (the index table grows to it).
const maxBlocks = 4096

func (s *sseResponse) blockStart(e *streamEvent) {
	s.start(nil, nil)
	var typ, id, name, text, input []byte
	for m := (chatMessagesMembers{b: e.block}); m.next(); {
		switch string(m.key) {
		case "type":
			typ = m.val
		case "id":
			id = m.val
		case "name":
			name = m.val
		case "text":
			text = m.val
		case "input":
			input = m.val
		}
	}
	switch string(typ) {
	case `"tool_use"`:
		index, ok := chatMessagesInt(e.index)
		if !ok || index >= maxBlocks {
			return
		}
		for int64(len(s.tools)) <= index {
			s.tools = append(s.tools, toolBlock{})
		}
		s.ntools++
		s.tools[index] = toolBlock{call: s.ntools, input: s.startInput(input)}
		s.out = s.appendChunkOpen(s.out)
		s.out = append(s.out, `{"tool_calls":[{"index":`...)
		s.out = strconv.AppendInt(s.out, int64(s.ntools-1), 10)
		s.out = append(s.out, `,"id":`...)
		s.out = appendRawString(s.out, id)
		s.out = append(s.out, `,"type":"function","function":{"name":`...)
		s.out = appendRawString(s.out, name)
		s.out = append(s.out, `,"arguments":""}}]`+chunkClose...)
	case `"text"`:
		// A text block starts empty; were it not, its text comes first.
		if len(text) > 2 && chatMessagesIsString(text) {
			s.out = s.appendChunkOpen(s.out)
			s.out = append(s.out, `{"content":`...)
			s.out = append(s.out, text...)
			s.out = append(s.out, chunkClose...)
		}
	}
	// thinking, redacted_thinking, server tool blocks: not the client's.
}

// startInput keeps a content_block_start input that is not {} (Anthropic
// sends {} and streams the input; some compatible backends send it whole
// here) as the JSON string the client would get, and returns its span in
// s.inputs.
func (s *sseResponse) startInput(input []byte) [2]int {
	if len(input) == 0 || input[0] != '{' || string(input) == "{}" {
		return [2]int{}
	}
	args := compactInput(input)
	if args == "{}" {
		return [2]int{}
	}
	start := len(s.inputs)
	s.inputs = jsonstr.Append(s.inputs, args)
	return [2]int{start, len(s.inputs)}
}

// endArguments sends the arguments of a tool block that streamed none:
// its start input, or {}. A chat client parses arguments as JSON, and ""
// (a tool without parameters) is not.
func (s *sseResponse) endArguments(b *toolBlock) {
	if b.call == 0 || b.sent {
		return
	}
	b.sent = true
	if b.input[1] > b.input[0] {
		s.appendArguments(b.call, s.inputs[b.input[0]:b.input[1]])
	} else {
		s.appendArguments(b.call, []byte(`"{}"`))
	}
}

// appendArguments writes a chunk with a tool call's next arguments (a raw
// JSON string); call is the tool call index + 1.
func (s *sseResponse) appendArguments(call int, args []byte) {
	s.out = s.appendChunkOpen(s.out)
	s.out = append(s.out, `{"tool_calls":[{"index":`...)
	s.out = strconv.AppendInt(s.out, int64(call-1), 10)
	s.out = append(s.out, `,"function":{"arguments":`...)
	s.out = append(s.out, args...)
	s.out = append(s.out, `}}]`+chunkClose...)
}

// appendRawString appends a raw JSON string literal, or ""
// when the value is not one.
func appendRawString(b []byte, raw []byte) []byte {
	if !chatMessagesIsString(raw) {
		return append(b, `""`...)
	}
	return append(b, raw...)
}

// appendError writes an error event the way OpenAI streams one: a data
// line with an error object, after which the client reads nothing more.
func (s *sseResponse) appendError(b []byte, typ, msg string) []byte {
	_, body := family.OpenAI.Render(&family.Error{Message: msg, Type: typ})
	b = append(b, "data: "...)
	b = append(b, body...)
	return append(b, "\n\n"...)
}
