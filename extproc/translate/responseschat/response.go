package responseschat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/jsonstr"
	"github.com/swarmgate/swarmgate/internal/schema/openai"
)

// chatChunk is a chat completion (JSON) or one chunk of a chat
// completion stream: the fields the translation reads.
type chatChunk struct {
	ID      string          `json:"id"`
	Created float64         `json:"created"`
	Model   string          `json:"model"`
	Choices []chatChoice    `json:"choices"`
	Usage   *openai.Usage   `json:"usage"`
	Error   json.RawMessage `json:"error"`
}

type chatChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`   // a stream chunk's
	Message      chatDelta `json:"message"` // a JSON answer's
	FinishReason string    `json:"finish_reason"`
}

type chatDelta struct {
	Content   string                 `json:"content"`
	Refusal   string                 `json:"refusal"`
	ToolCalls []openai.ToolCallDelta `json:"tool_calls"`
}

// itemKind is an output item's type.
type itemKind uint8

const (
	messageItem itemKind = iota
	callItem
)

// outputItem is one output item of the Response being built.
type outputItem struct {
	kind   itemKind
	id     string
	status string // in_progress until done: completed or incomplete
	// A message: its text and refusal parts, in the order they came
	// (textPart and refusalPart are content indexes, -1 for none). Text
	// and arguments are kept as escaped JSON string contents.
	text, refusal         []byte
	textPart, refusalPart int
	// A function call.
	chatIndex    int // the chat tool call's index
	callID, name string
	args         []byte
}

// responseResult is the Response object being built.
type responseResult struct {
	id, model  string
	created    int64
	status     string // in_progress, completed, incomplete, failed
	incomplete string // incomplete_details.reason
	errCode    string // error.code of a failed response
	errMessage string
	items      []outputItem
	usage      *openai.Usage
	echo       requestEcho
	// namespaced maps the chat names of the request's namespaced
	// functions back to them (nil when it declared none).
	namespaced map[string]nsName
}

// nsName is a namespaced function as the client declared it.
type nsName struct{ namespace, name string }

// namespacedTools maps each namespaced function of the request's
// tools to its chat name (flatName); nil when there is none.
func namespacedTools(tools json.RawMessage) map[string]nsName {
	if !bytes.Contains(tools, []byte(`"namespace"`)) {
		return nil
	}
	var ts []functionTool
	if json.Unmarshal(tools, &ts) != nil {
		return nil
	}
	var m map[string]nsName
	for _, t := range ts {
		if t.Type != "namespace" || t.Name == "" {
			continue
		}
		for _, raw := range t.Tools {
			var it functionTool
			if json.Unmarshal(raw, &it) != nil || it.Type != "function" || it.Name == "" {
				continue
			}
			if m == nil {
				m = make(map[string]nsName)
			}
			m[flatName(t.Name, it.Name)] = nsName{t.Name, it.Name}
		}
	}
	return m
}

// callName is the name (and namespace, "" for none) the client declared
// for a chat tool call's function name.
func (r *responseResult) callName(chat string) (namespace, name string) {
	if n, ok := r.namespaced[chat]; ok {
		return n.namespace, n.name
	}
	return "", chat
}

// requestEcho is what a Response repeats of its request, as the
// client wrote it; a field the client did not send is written as the
// Responses API's default.
type requestEcho struct {
	Instructions      json.RawMessage `json:"instructions"`
	Metadata          json.RawMessage `json:"metadata"`
	ParallelToolCalls json.RawMessage `json:"parallel_tool_calls"`
	Temperature       json.RawMessage `json:"temperature"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	Tools             json.RawMessage `json:"tools"`
	TopP              json.RawMessage `json:"top_p"`
	MaxOutputTokens   json.RawMessage `json:"max_output_tokens"`
	Text              json.RawMessage `json:"text"`
	Reasoning         json.RawMessage `json:"reasoning"`
	User              json.RawMessage `json:"user"`
}

// echoOf reads the echo from the client's request (the
// router-level filter validated it; anything unreadable echoes defaults).
func echoOf(req []byte) requestEcho {
	var e requestEcho
	if len(req) > 0 && json.Unmarshal(req, &e) != nil {
		return requestEcho{}
	}
	return e
}

// appendEcho writes ,"name":value, the client's value or def.
func appendEcho(b []byte, name string, v json.RawMessage, def string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	if len(bytes.TrimSpace(v)) == 0 {
		return append(b, def...)
	}
	var c bytes.Buffer
	if json.Compact(&c, v) != nil {
		return append(b, def...)
	}
	return append(b, c.Bytes()...)
}

// finish applies a chat finish_reason to the result.
func (r *responseResult) finish(reason string) {
	r.status = "completed"
	switch reason {
	case "length":
		r.status, r.incomplete = "incomplete", "max_output_tokens"
	case "content_filter":
		r.status, r.incomplete = "incomplete", "content_filter"
	}
}

// itemStatus is the status a finished item gets: incomplete when the
// answer was cut short.
func (r *responseResult) itemStatus() string {
	if r.status == "completed" {
		return "completed"
	}
	return "incomplete"
}

// appendResponse writes the Response object. What the chat answer does not
// tell (the request's temperature, top_p, tool_choice, tools,
// instructions...) is echoed from the client's request when the caller
// kept it (ResponseOptions.Request), else written as the Responses
// defaults or null (docs/translation-responses-chat.md).
func (r *responseResult) appendResponse(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = jsonstr.Append(b, r.id)
	// A chat completions backend serves the standard access program only
	// (a request for another is refused, refuseState).
	b = append(b, `,"access_programs":{"cyber":"standard"},"object":"response","created_at":`...)
	b = appendInt(b, r.created)
	b = append(b, `,"status":`...)
	b = jsonstr.Append(b, r.status)
	b = append(b, `,"background":false,"error":`...)
	if r.status == "failed" {
		b = append(b, `{"code":`...)
		b = jsonstr.Append(b, r.errCode)
		b = append(b, `,"message":`...)
		b = jsonstr.Append(b, r.errMessage)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"incomplete_details":`...)
	if r.incomplete != "" {
		b = append(b, `{"reason":`...)
		b = jsonstr.Append(b, r.incomplete)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	b = appendEcho(b, "instructions", r.echo.Instructions, "null")
	if len(r.echo.MaxOutputTokens) > 0 {
		b = appendEcho(b, "max_output_tokens", r.echo.MaxOutputTokens, "null")
	}
	b = appendEcho(b, "metadata", r.echo.Metadata, "{}")
	b = append(b, `,"model":`...)
	b = jsonstr.Append(b, r.model)
	b = append(b, `,"output":[`...)
	for i := range r.items {
		if i > 0 {
			b = append(b, ',')
		}
		b = r.items[i].appendItem(b, true, r)
	}
	b = append(b, ']')
	b = appendEcho(b, "parallel_tool_calls", r.echo.ParallelToolCalls, "true")
	b = append(b, `,"previous_response_id":null`...)
	if len(r.echo.Reasoning) > 0 {
		b = appendEcho(b, "reasoning", r.echo.Reasoning, "null")
	}
	b = append(b, `,"store":false`...)
	b = appendEcho(b, "temperature", r.echo.Temperature, "null")
	if len(r.echo.Text) > 0 {
		b = appendEcho(b, "text", r.echo.Text, "null")
	}
	b = appendEcho(b, "tool_choice", r.echo.ToolChoice, `"auto"`)
	b = appendEcho(b, "tools", r.echo.Tools, "[]")
	b = appendEcho(b, "top_p", r.echo.TopP, "null")
	b = append(b, `,"truncation":"disabled"`...)
	if len(r.echo.User) > 0 {
		b = appendEcho(b, "user", r.echo.User, "null")
	}
	if u := r.usage; u != nil {
		b = append(b, `,"usage":{"input_tokens":`...)
		b = appendInt(b, u.PromptTokens)
		b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
		b = appendInt(b, u.CachedTokens())
		b = append(b, `},"output_tokens":`...)
		b = appendInt(b, u.CompletionTokens)
		b = append(b, `,"output_tokens_details":{"reasoning_tokens":`...)
		b = appendInt(b, u.ReasoningTokens())
		b = append(b, `},"total_tokens":`...)
		total := u.TotalTokens
		if total == 0 {
			total = u.PromptTokens + u.CompletionTokens
		}
		b = appendInt(b, total)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendItem writes the output item; full writes its content (text,
// arguments), otherwise it is written as output_item.added announces it:
// no content parts, empty arguments.
func (it *outputItem) appendItem(b []byte, full bool, r *responseResult) []byte {
	if it.kind == callItem {
		b = append(b, `{"type":"function_call","id":`...)
		b = jsonstr.Append(b, it.id)
		b = append(b, `,"call_id":`...)
		b = jsonstr.Append(b, it.callID)
		ns, name := r.callName(it.name)
		if ns != "" {
			b = append(b, `,"namespace":`...)
			b = jsonstr.Append(b, ns)
		}
		b = append(b, `,"name":`...)
		b = jsonstr.Append(b, name)
		b = append(b, `,"arguments":`...)
		if full {
			b = appendRaw(b, it.args)
		} else {
			b = append(b, `""`...)
		}
		b = append(b, `,"status":`...)
		b = jsonstr.Append(b, it.status)
		return append(b, '}')
	}
	b = append(b, `{"type":"message","id":`...)
	b = jsonstr.Append(b, it.id)
	b = append(b, `,"status":`...)
	b = jsonstr.Append(b, it.status)
	b = append(b, `,"role":"assistant","content":[`...)
	if full {
		for p := 0; p < 2; p++ {
			if p > 0 && it.textPart >= 0 && it.refusalPart >= 0 {
				b = append(b, ',')
			}
			if p == it.textPart {
				b = it.appendPart(b, false, true)
			} else if p == it.refusalPart {
				b = it.appendPart(b, true, true)
			}
		}
	}
	return append(b, "]}"...)
}

// appendPart writes the message's text (or refusal) content part, empty
// unless full.
func (it *outputItem) appendPart(b []byte, refusal, full bool) []byte {
	if refusal {
		b = append(b, `{"type":"refusal","refusal":`...)
		if full {
			b = appendRaw(b, it.refusal)
		} else {
			b = append(b, `""`...)
		}
		return append(b, '}')
	}
	b = append(b, `{"type":"output_text","annotations":[],"logprobs":[],"text":`...)
	if full {
		b = appendRaw(b, it.text)
	} else {
		b = append(b, `""`...)
	}
	return append(b, '}')
}

// appendRaw appends escaped JSON string contents as a JSON
// string.
func appendRaw(b, escaped []byte) []byte {
	b = append(b, '"')
	b = append(b, escaped...)
	return append(b, '"')
}

// appendEscaped appends s escaped as JSON string contents
// (without the quotes).
func appendEscaped(b []byte, s string) []byte {
	n := len(b)
	b = jsonstr.Append(b, s)
	copy(b[n:], b[n+1:len(b)-1])
	return b[:len(b)-2]
}

// jsonResponse holds a chat completion to its end and writes it as a
// Response object.
type jsonResponse struct {
	o    translate.ResponseOptions
	buf  []byte
	over bool
}

func newResponse(o translate.ResponseOptions) translate.Response {
	switch {
	case o.Status >= 400:
		return translate.NewErrorResponse(o.Status, family.OpenAI)
	case o.Stream:
		return newStream(o)
	}
	return &jsonResponse{o: o}
}

var errTooLarge = errors.New("translate: the chat completion exceeds 16 MiB")

func (*jsonResponse) Done() bool { return false }

func (r *jsonResponse) Write(dst, chunk []byte, end bool) ([]byte, error) {
	if r.over {
		return dst, errTooLarge
	}
	if len(r.buf)+len(chunk) > translate.MaxBuffered {
		r.over, r.buf = true, nil
		return dst, errTooLarge
	}
	r.buf = append(r.buf, chunk...)
	if !end {
		return dst, nil
	}
	var c chatChunk
	if err := json.Unmarshal(r.buf, &c); err != nil {
		return dst, fmt.Errorf("translate: reading a chat completion: %w", err)
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return dst, fmt.Errorf("translate: the chat completion is an error at status %d", r.o.Status)
	}
	res := responseResult{model: c.Model, created: int64(c.Created), usage: c.Usage, echo: echoOf(r.o.Request)}
	res.namespaced = namespacedTools(res.echo.Tools)
	base := idBase(c.ID, r.o.RequestID)
	res.id = "resp_" + base
	if res.created == 0 {
		res.created = r.o.Created
	}
	var ch *chatChoice
	for i := range c.Choices {
		if c.Choices[i].Index == 0 {
			ch = &c.Choices[i]
			break
		}
	}
	res.status = "completed"
	if ch != nil {
		res.finish(ch.FinishReason)
		m := &ch.Message
		if m.Content != "" || m.Refusal != "" {
			it := outputItem{kind: messageItem, id: "msg_" + base, status: res.itemStatus(), textPart: -1, refusalPart: -1}
			if m.Content != "" {
				it.textPart, it.text = 0, appendEscaped(nil, m.Content)
			}
			if m.Refusal != "" {
				it.refusalPart, it.refusal = 0, appendEscaped(nil, m.Refusal)
				if it.textPart == 0 {
					it.refusalPart = 1
				}
			}
			res.items = append(res.items, it)
		}
		for i, tc := range m.ToolCalls {
			res.items = append(res.items, outputItem{
				kind: callItem, id: callItemID(base, i), status: res.itemStatus(),
				callID: callIDOf(tc.ID, base, i), name: tc.Function.Name, args: appendEscaped(nil, tc.Function.Arguments),
			})
		}
	}
	return res.appendResponse(dst), nil
}

// callItemID names the answer's n-th function_call item.
func callItemID(base string, n int) string {
	return "fc_" + base + "_" + fmt.Sprint(n)
}

// callIDOf is the call id the client answers with: the chat
// tool call's id, or one derived from the answer (n: the call's order)
// when the backend sent none.
func callIDOf(id, base string, n int) string {
	if id != "" {
		return id
	}
	return "call_" + base + "_" + fmt.Sprint(n)
}
