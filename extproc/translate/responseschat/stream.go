package responseschat

import (
	"encoding/json"
	"fmt"

	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/jsonstr"
)

// sseResponse translates a chat completions stream into the
// Responses API's event sequence:
//
//	response.created, response.in_progress            (at the first chunk)
//	per message: response.output_item.added, response.content_part.added,
//	  response.output_text.delta (or response.refusal.delta) per chunk,
//	  then response.output_text.done, response.content_part.done,
//	  response.output_item.done
//	per tool call: response.output_item.added,
//	  response.function_call_arguments.delta per chunk, then
//	  response.function_call_arguments.done, response.output_item.done
//	response.completed | response.incomplete | response.failed
//
// A message is done when a tool call starts (text after it opens another
// message); tool calls are done when the answer finishes, so a backend
// that interleaves parallel calls' arguments still translates. The final
// event carries the whole Response with usage, which the chat stream sends
// in a chunk of its own after the finish_reason chunk: the final event
// waits for it, for [DONE], or for the stream's end.
type sseResponse struct {
	o      translate.ResponseOptions
	events translate.Events
	onEvt  func(translate.Event) error
	out    []byte // dst while Write runs
	chunk  chatChunk
	delta  responsesChatDeltaChunk
	esc    []byte // a decoded string escaped again
	noScan bool   // tests: every chunk through encoding/json

	res       responseResult
	base      string
	seq       int64
	started   bool
	finishing bool // a finish_reason came
	done      bool // the final event was written
	msg       int  // the open message's item index, -1 for none
	calls     []int
}

func newStream(o translate.ResponseOptions) *sseResponse {
	s := &sseResponse{o: o, msg: -1}
	s.res.echo = echoOf(o.Request)
	s.res.namespaced = namespacedTools(s.res.echo.Tools)
	s.onEvt = s.event
	return s
}

// Done: the final event (response.completed, .incomplete or .failed) was
// written; completed comes at the backend's usage chunk, before its [DONE].
func (s *sseResponse) Done() bool { return s.done }

func (s *sseResponse) Write(dst, chunk []byte, end bool) ([]byte, error) {
	s.out = dst
	err := s.events.Feed(chunk, end, s.onEvt)
	if err == nil && end && !s.done {
		s.last()
	}
	dst, s.out = s.out, nil
	return dst, err
}

// last writes the final event at the backend's [DONE] or the stream's
// end: response.completed (or .incomplete) after a finish_reason, else
// response.failed, as the answer was cut short.
func (s *sseResponse) last() {
	if !s.started {
		s.start()
	}
	if s.finishing {
		s.complete()
	} else {
		s.fail("server_error", "the backend's stream ended before its answer was complete")
	}
}

func (s *sseResponse) event(e translate.Event) error {
	if s.done {
		return nil
	}
	if string(e.Data) == "[DONE]" {
		s.last()
		return nil
	}
	// Most chunks are one delta: read without encoding/json.
	if s.started && !s.noScan && responsesChatScanDelta(e.Data, &s.delta) {
		s.scanned(&s.delta)
	} else if err := s.decode(e.Data); err != nil || s.done {
		return err
	}
	if s.finishing && s.res.usage != nil {
		s.complete()
	}
	return nil
}

// scanned translates a chunk the one-pass scanner read.
func (s *sseResponse) scanned(d *responsesChatDeltaChunk) {
	if d.content != nil {
		s.text(d.content, false)
	}
	if d.refusal != nil {
		s.text(d.refusal, true)
	}
	if d.hasArgs {
		s.toolCall(d.argsIndex, "", "", d.args)
	}
	if d.finish != nil {
		s.finishing = true
		s.res.finish(string(d.finish))
	}
}

// decode translates any other chunk through encoding/json: the first one
// (which starts the Response), a tool call's opening delta, usage, an
// error.
func (s *sseResponse) decode(data []byte) error {
	c := &s.chunk
	ch := c.Choices[:cap(c.Choices)]
	clear(ch)
	*c = chatChunk{Choices: ch[:0]}
	if err := json.Unmarshal(data, c); err != nil {
		return fmt.Errorf("translate: reading a chat completion chunk: %w", err)
	}
	if !s.started {
		s.res.model, s.res.created = c.Model, int64(c.Created)
		s.base = idBase(c.ID, s.o.RequestID)
		s.start()
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		s.chunkError(c.Error)
		return nil
	}
	for i := range c.Choices {
		if c.Choices[i].Index == 0 { // a Response has one answer
			s.choice(&c.Choices[i].Delta, c.Choices[i].FinishReason)
		}
	}
	if c.Usage != nil {
		s.res.usage = c.Usage
		c.Usage = nil // the result keeps it
	}
	return nil
}

// choice translates the delta of the answer's choice.
func (s *sseResponse) choice(d *chatDelta, finish string) {
	if d.Content != "" {
		s.esc = appendEscaped(s.esc[:0], d.Content)
		s.text(s.esc, false)
	}
	if d.Refusal != "" {
		s.esc = appendEscaped(s.esc[:0], d.Refusal)
		s.text(s.esc, true)
	}
	for j := range d.ToolCalls {
		tc := &d.ToolCalls[j]
		s.esc = appendEscaped(s.esc[:0], tc.Function.Arguments)
		s.toolCall(tc.Index, tc.ID, tc.Function.Name, s.esc)
	}
	if finish != "" {
		s.finishing = true
		s.res.finish(finish)
	}
}

// chunkError ends the Response as failed with the error a chunk carries.
func (s *sseResponse) chunkError(raw json.RawMessage) {
	var m translate.ErrorMessage
	if json.Unmarshal(raw, &m) != nil {
		_ = json.Unmarshal(raw, &m.Message)
	}
	code, _ := m.Code.(string)
	if code == "" {
		code = "server_error"
	}
	if m.Message == "" {
		m.Message = "the backend's stream failed"
	}
	s.fail(code, m.Message)
}

// begin writes an event's name and the start of its data object, through
// its sequence number.
func (s *sseResponse) begin(name string) {
	b := append(s.out, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: {\"type\":\""...)
	b = append(b, name...)
	b = append(b, `","sequence_number":`...)
	s.out = appendInt(b, s.seq)
	s.seq++
}

func (s *sseResponse) end() { s.out = append(s.out, "}\n\n"...) }

// itemRef writes an event's item_id and output_index.
func (s *sseResponse) itemRef(i int) {
	b := append(s.out, `,"item_id":`...)
	b = jsonstr.Append(b, s.res.items[i].id)
	b = append(b, `,"output_index":`...)
	s.out = appendInt(b, int64(i))
}

func (s *sseResponse) responseEvent(name string) {
	s.begin(name)
	s.out = append(s.out, `,"response":`...)
	s.out = s.res.appendResponse(s.out)
	s.end()
}

func (s *sseResponse) start() {
	s.started = true
	if s.base == "" {
		s.base = idBase("", s.o.RequestID)
	}
	s.res.id = "resp_" + s.base
	if s.res.created == 0 {
		s.res.created = s.o.Created
	}
	s.res.status = "in_progress"
	s.responseEvent("response.created")
	s.responseEvent("response.in_progress")
}

// itemEvent writes output_item.added or output_item.done for item i.
func (s *sseResponse) itemEvent(name string, i int, full bool) {
	s.begin(name)
	s.out = append(s.out, `,"output_index":`...)
	s.out = appendInt(s.out, int64(i))
	s.out = append(s.out, `,"item":`...)
	s.out = s.res.items[i].appendItem(s.out, full, &s.res)
	s.end()
}

// text translates a content (or refusal) delta, escaped JSON string
// contents, opening the message and its part when it is the first.
func (s *sseResponse) text(delta []byte, refusal bool) {
	if s.msg < 0 {
		id := "msg_" + s.base
		if len(s.res.items) > 0 {
			id += "_" + fmt.Sprint(len(s.res.items))
		}
		s.msg = len(s.res.items)
		s.res.items = append(s.res.items, outputItem{kind: messageItem, id: id, status: "in_progress", textPart: -1, refusalPart: -1})
		s.itemEvent("response.output_item.added", s.msg, false)
	}
	it := &s.res.items[s.msg]
	part := &it.textPart
	if refusal {
		part = &it.refusalPart
	}
	if *part < 0 {
		*part = 0
		if it.textPart >= 0 && it.refusalPart >= 0 {
			*part = 1
		}
		s.begin("response.content_part.added")
		s.itemRef(s.msg)
		s.out = append(s.out, `,"content_index":`...)
		s.out = appendInt(s.out, int64(*part))
		s.out = append(s.out, `,"part":`...)
		s.out = it.appendPart(s.out, refusal, false)
		s.end()
	}
	if refusal {
		it.refusal = append(it.refusal, delta...)
		s.begin("response.refusal.delta")
	} else {
		it.text = append(it.text, delta...)
		s.begin("response.output_text.delta")
	}
	s.itemRef(s.msg)
	s.out = append(s.out, `,"content_index":`...)
	s.out = appendInt(s.out, int64(*part))
	s.out = append(s.out, `,"delta":`...)
	s.out = appendRaw(s.out, delta)
	if !refusal {
		s.out = append(s.out, `,"logprobs":[]`...)
	}
	s.end()
}

// closeMessage writes the open message's done events, the message's
// status being status.
func (s *sseResponse) closeMessage(status string) {
	i := s.msg
	if i < 0 {
		return
	}
	s.msg = -1
	it := &s.res.items[i]
	for p := 0; p < 2; p++ {
		refusal := p == it.refusalPart
		if !refusal && p != it.textPart {
			continue
		}
		if refusal {
			s.begin("response.refusal.done")
			s.itemRef(i)
			s.out = append(s.out, `,"content_index":`...)
			s.out = appendInt(s.out, int64(p))
			s.out = append(s.out, `,"refusal":`...)
			s.out = appendRaw(s.out, it.refusal)
		} else {
			s.begin("response.output_text.done")
			s.itemRef(i)
			s.out = append(s.out, `,"content_index":`...)
			s.out = appendInt(s.out, int64(p))
			s.out = append(s.out, `,"text":`...)
			s.out = appendRaw(s.out, it.text)
			s.out = append(s.out, `,"logprobs":[]`...)
		}
		s.end()
		s.begin("response.content_part.done")
		s.itemRef(i)
		s.out = append(s.out, `,"content_index":`...)
		s.out = appendInt(s.out, int64(p))
		s.out = append(s.out, `,"part":`...)
		s.out = it.appendPart(s.out, refusal, true)
		s.end()
	}
	it.status = status
	s.itemEvent("response.output_item.done", i, true)
}

// toolCall translates one tool call delta (args escaped JSON string
// contents): the first of its index opens a function_call item, and so
// does a new id under an index already seen (some backends number every
// call 0). Items are named by their order among the calls, as in a JSON
// answer, so two calls under one index do not share an id.
func (s *sseResponse) toolCall(index int, id, name string, args []byte) {
	i := -1
	for k := len(s.calls) - 1; k >= 0; k-- { // the latest call of the index
		if it := &s.res.items[s.calls[k]]; it.chatIndex == index {
			if id == "" || id == it.callID {
				i = s.calls[k]
			}
			break
		}
	}
	if i < 0 {
		s.closeMessage("completed")
		i = len(s.res.items)
		n := len(s.calls)
		s.calls = append(s.calls, i)
		s.res.items = append(s.res.items, outputItem{
			kind: callItem, id: callItemID(s.base, n), status: "in_progress",
			chatIndex: index, callID: callIDOf(id, s.base, n), name: name,
			textPart: -1, refusalPart: -1,
		})
		s.itemEvent("response.output_item.added", i, false)
	} else if name != "" {
		s.res.items[i].name += name // a name sent in pieces
	}
	if len(args) == 0 {
		return
	}
	it := &s.res.items[i]
	it.args = append(it.args, args...)
	s.begin("response.function_call_arguments.delta")
	s.itemRef(i)
	s.out = append(s.out, `,"delta":`...)
	s.out = appendRaw(s.out, args)
	s.end()
}

// complete closes every open item and writes response.completed (or
// response.incomplete), after a finish_reason.
func (s *sseResponse) complete() {
	s.closeMessage(s.res.itemStatus())
	for _, i := range s.calls {
		it := &s.res.items[i]
		s.begin("response.function_call_arguments.done")
		s.itemRef(i)
		_, name := s.res.callName(it.name)
		s.out = append(s.out, `,"name":`...)
		s.out = jsonstr.Append(s.out, name)
		s.out = append(s.out, `,"arguments":`...)
		s.out = appendRaw(s.out, it.args)
		s.end()
		it.status = s.res.itemStatus()
		s.itemEvent("response.output_item.done", i, true)
	}
	s.calls = s.calls[:0]
	s.done = true
	if s.res.status == "completed" {
		s.responseEvent("response.completed")
	} else {
		s.responseEvent("response.incomplete")
	}
}

// fail ends the stream with response.failed; items still open are
// incomplete in its output (no done events: the backend never finished
// them).
func (s *sseResponse) fail(code, message string) {
	for i := range s.res.items {
		if s.res.items[i].status == "in_progress" {
			s.res.items[i].status = "incomplete"
		}
	}
	s.res.status, s.res.incomplete = "failed", ""
	s.res.errCode, s.res.errMessage = code, message
	s.done = true
	s.responseEvent("response.failed")
}
