package messageschat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/jsonscan"
	"github.com/swarmgate/swarmgate/internal/jsonstr"
	"github.com/swarmgate/swarmgate/internal/schema/anthropic"
	"github.com/swarmgate/swarmgate/internal/schema/openai"
)

// sseResponse translates a chat chunk stream event by event. A
// chunk is checked with jsonscan.Valid and then walked in place: its text and
// argument strings are copied as their JSON tokens, never decoded, so a
// text delta costs no allocation.
type sseResponse struct {
	o      translate.ResponseOptions
	events translate.Events
	out    []byte // what the event being handled appends

	started  bool
	done     bool   // message_stop or error written: the rest is ignored
	stopped  bool   // message_stop written: the client has the whole answer
	finish   string // the finish_reason seen, "" before
	usage    []byte // the last usage object seen, decoded at the end
	next     int    // the next content block index
	open     byte   // the open block: 0 none, 't' text, 'f' tool_use
	openTool int    // the chat tool call index of the open tool_use block
	openID   []byte // and its id as the backend wrote it (JSON), if any
	tools    []int  // the chat tool call indexes given a block
}

// legacyCall is the tool call index a legacy function_call
// delta is handled under.
const legacyCall = -1

// isString is a raw JSON value that is a non-empty string.
func isString(r []byte) bool {
	return len(r) > 2 && r[0] == '"'
}

// Done: message_stop was written, at the backend's usage chunk after its
// finish_reason or at its [DONE], whichever came first.
func (s *sseResponse) Done() bool { return s.stopped }

func (s *sseResponse) Write(dst, chunk []byte, end bool) ([]byte, error) {
	s.out = dst
	err := s.events.Feed(chunk, end, s.event)
	if err == nil && end && !s.done {
		if s.finish != "" {
			s.stop()
		} else {
			s.fail("api_error", "the backend's stream ended before its answer was complete")
		}
	}
	dst, s.out = s.out, nil
	return dst, err
}

func (s *sseResponse) event(e translate.Event) error {
	if s.done {
		return nil
	}
	data := bytes.TrimSpace(e.Data)
	if string(data) == "[DONE]" {
		if s.finish != "" {
			s.stop()
		} else {
			s.fail("api_error", "the backend's stream ended before its answer was complete")
		}
		return nil
	}
	if string(e.Name) == "error" {
		s.out = translate.AppendEvent(s.out, "error", translate.ErrorBody(data, 0, family.Anthropic))
		s.done = true
		return nil
	}
	top, ok := messagesChatEnter(data, '{')
	if !ok || !jsonscan.Valid(data) {
		return fmt.Errorf("translate: a backend chunk is not a JSON object: %.80q", data)
	}
	var id, model, choices, usage, failure []byte
	for k, v, ok := top.member(); ok; k, v, ok = top.member() {
		switch string(k) {
		case "id":
			id = v
		case "model":
			model = v
		case "choices":
			choices = v
		case "usage":
			usage = v
		case "error":
			failure = v
		}
	}
	if present(failure) {
		s.out = translate.AppendEvent(s.out, "error", translate.ErrorBody(data, 0, family.Anthropic))
		s.done = true
		return nil
	}
	if !s.started {
		s.start(id, model)
	}
	list, _ := messagesChatEnter(choices, '[')
	for ch, ok := list.elem(); ok; ch, ok = list.elem() {
		if err := s.choice(ch); err != nil || s.done {
			return err
		}
	}
	if len(usage) > 0 && usage[0] == '{' {
		s.usage = append(s.usage[:0], usage...)
		if s.finish != "" {
			s.stop()
		}
	}
	return nil
}

// choice translates one choices[] entry of a chunk: Messages has one
// answer, so only choice 0 (chat may have been asked for n).
func (s *sseResponse) choice(ch []byte) error {
	obj, _ := messagesChatEnter(ch, '{')
	index := 0
	var delta, finish []byte
	for k, v, ok := obj.member(); ok; k, v, ok = obj.member() {
		switch string(k) {
		case "index":
			n, ok := messagesChatInt(v)
			if !ok {
				return fmt.Errorf("translate: a backend chunk's choice index is %.20q", v)
			}
			index = n
		case "delta":
			delta = v
		case "finish_reason":
			finish = v
		}
	}
	if index != 0 || s.finish != "" {
		return nil
	}
	var content, refusal, calls, fcall []byte
	d, _ := messagesChatEnter(delta, '{')
	for k, v, ok := d.member(); ok; k, v, ok = d.member() {
		switch string(k) {
		case "content":
			content = v
		case "refusal":
			refusal = v
		case "tool_calls":
			calls = v
		case "function_call":
			fcall = v
		}
	}
	if isString(content) {
		s.text(content)
	}
	if isString(refusal) {
		s.text(refusal) // a refusal is the model's answer in words
	}
	list, _ := messagesChatEnter(calls, '[')
	for call, ok := list.elem(); ok; call, ok = list.elem() {
		c, _ := messagesChatEnter(call, '{')
		index = 0
		var id, fn []byte
		for k, v, ok := c.member(); ok; k, v, ok = c.member() {
			switch string(k) {
			case "index":
				n, ok := messagesChatInt(v)
				if !ok {
					return fmt.Errorf("translate: a backend chunk's tool call index is %.20q", v)
				}
				index = n
			case "id":
				id = v
			case "function":
				fn = v
			}
		}
		name, args := readFunction(fn)
		if !s.tool(index, id, name, args) {
			return nil
		}
	}
	if len(fcall) > 0 && fcall[0] == '{' {
		name, args := readFunction(fcall)
		if !s.tool(legacyCall, nil, name, args) {
			return nil
		}
	}
	if isString(finish) {
		s.closeBlock()
		s.finish = string(finish[1 : len(finish)-1])
	}
	return nil
}

// readFunction is a function object's name and arguments, raw.
func readFunction(fn []byte) (name, args []byte) {
	f, _ := messagesChatEnter(fn, '{')
	for k, v, ok := f.member(); ok; k, v, ok = f.member() {
		switch string(k) {
		case "name":
			name = v
		case "arguments":
			args = v
		}
	}
	return name, args
}

// start writes message_start. Usage is known only at the end: it is 0
// here and stated in message_delta.
func (s *sseResponse) start(rawID, rawModel []byte) {
	s.started = true
	var id, model string
	_ = json.Unmarshal(rawID, &id)
	_ = json.Unmarshal(rawModel, &model)
	msg := anthropic.Message{ID: messageID(id, s.o.RequestID), Type: "message", Role: "assistant", Model: model, Content: []any{}}
	b, _ := marshal(msg) // stop_reason is null until message_delta
	s.out = append(s.out, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":"...)
	s.out = append(s.out, b...)
	s.out = append(s.out, "}\n\n"...)
}

func (s *sseResponse) text(raw []byte) {
	if s.open != 't' {
		s.closeBlock()
		s.open = 't'
		s.out = append(s.out, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":"...)
		s.out = strconv.AppendInt(s.out, int64(s.next), 10)
		s.out = append(s.out, ",\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"...)
	}
	s.out = append(s.out, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
	s.out = strconv.AppendInt(s.out, int64(s.next), 10)
	s.out = append(s.out, ",\"delta\":{\"type\":\"text_delta\",\"text\":"...)
	s.out = append(s.out, raw...)
	s.out = append(s.out, "}}\n\n"...)
}

// tool handles one tool call delta. A call starts a tool_use block when
// its index changes, or when it names a new id under the same index (some
// backends number every call 0). A fragment without an id for a call whose
// block was already closed ends the stream in an error (false): the
// backend interleaved parallel calls, and blocks cannot reopen.
func (s *sseResponse) tool(index int, id, name, args []byte) bool {
	named := isString(id)
	if s.open != 'f' || s.openTool != index || named && !bytes.Equal(id, s.openID) {
		if !named && slices.Contains(s.tools, index) {
			s.fail("api_error", "the backend interleaved the arguments of parallel tool calls, which a Messages stream cannot express")
			return false
		}
		s.closeBlock()
		s.open, s.openTool = 'f', index
		s.openID = append(s.openID[:0], id...)
		s.tools = append(s.tools, index)
		s.out = append(s.out, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":"...)
		s.out = strconv.AppendInt(s.out, int64(s.next), 10)
		s.out = append(s.out, ",\"content_block\":{\"type\":\"tool_use\",\"id\":"...)
		if isString(id) {
			s.out = append(s.out, id...)
		} else {
			s.out = jsonstr.Append(s.out, toolID(s.o.RequestID, len(s.tools)-1))
		}
		s.out = append(s.out, ",\"name\":"...)
		if isString(name) {
			s.out = append(s.out, name...)
		} else {
			s.out = append(s.out, `""`...)
		}
		s.out = append(s.out, ",\"input\":{}}}\n\n"...)
	}
	if isString(args) {
		s.out = append(s.out, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
		s.out = strconv.AppendInt(s.out, int64(s.next), 10)
		s.out = append(s.out, ",\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":"...)
		s.out = append(s.out, args...)
		s.out = append(s.out, "}}\n\n"...)
	}
	return true
}

func (s *sseResponse) closeBlock() {
	if s.open == 0 {
		return
	}
	s.out = append(s.out, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":"...)
	s.out = strconv.AppendInt(s.out, int64(s.next), 10)
	s.out = append(s.out, "}\n\n"...)
	s.open = 0
	s.next++
}

// stop writes message_delta (stop reason and the whole answer's usage)
// and message_stop.
func (s *sseResponse) stop() {
	s.closeBlock()
	s.out = append(s.out, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\""...)
	s.out = append(s.out, stopReason(s.finish, len(s.tools) > 0)...)
	s.out = append(s.out, "\",\"stop_sequence\":null},\"usage\":{"...)
	var usage openai.Usage
	if len(s.usage) == 0 || json.Unmarshal(s.usage, &usage) != nil {
		s.out = append(s.out, "\"output_tokens\":0"...)
	} else {
		u := anthropicUsage(&usage)
		s.out = append(s.out, "\"input_tokens\":"...)
		s.out = strconv.AppendInt(s.out, u.InputTokens, 10)
		s.out = append(s.out, ",\"cache_read_input_tokens\":"...)
		s.out = strconv.AppendInt(s.out, u.CacheReadInputTokens, 10)
		s.out = append(s.out, ",\"output_tokens\":"...)
		s.out = strconv.AppendInt(s.out, u.OutputTokens, 10)
	}
	s.out = append(s.out, "}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
	s.done, s.stopped = true, true
}

// fail ends the stream with an Anthropic error event.
func (s *sseResponse) fail(typ, message string) {
	s.out = append(s.out, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"...)
	s.out = strconv.AppendQuote(s.out, typ)
	s.out = append(s.out, ",\"message\":"...)
	s.out = strconv.AppendQuote(s.out, message)
	s.out = append(s.out, "}}\n\n"...)
	s.done = true
}
