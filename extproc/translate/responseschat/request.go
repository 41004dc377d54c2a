package responseschat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/jsonstr"
)

// responsesRequest is the part of a Responses API request body
// (POST /v1/responses) the translation reads. Fields it does not name are
// dropped (docs/translation-responses-chat.md lists them). Polymorphic
// fields stay raw until their shape is known; numbers the backend gets
// unchanged stay raw so they keep their bytes.
type responsesRequest struct {
	Model             string            `json:"model"`
	Instructions      *string           `json:"instructions"`
	Input             json.RawMessage   `json:"input"`
	Tools             []json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls"`
	MaxOutputTokens   json.RawMessage   `json:"max_output_tokens"`
	Temperature       json.RawMessage   `json:"temperature"`
	TopP              json.RawMessage   `json:"top_p"`
	User              *string           `json:"user"`
	SafetyIdentifier  *string           `json:"safety_identifier"`
	Text              *textOptions      `json:"text"`
	Reasoning         *reasn            `json:"reasoning"`
	Stream            *bool             `json:"stream"`

	// Server-side state: refused.
	PreviousResponseID *string         `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	Background         *bool           `json:"background"`
	Prompt             json.RawMessage `json:"prompt"`
	Truncation         *string         `json:"truncation"`
	AccessPrograms     *accessPrograms `json:"access_programs"`
}

// accessPrograms selects domain-specific access programs (cyber:
// standard, daybreak_blue, daybreak_red).
type accessPrograms struct {
	Cyber *string `json:"cyber"`
}

type textOptions struct {
	Format json.RawMessage `json:"format"`
}

type reasn struct {
	Effort *string `json:"effort"`
}

// inputItem is one input item: a message (type "message", or a
// role and no type), a function_call, a function_call_output, or an item
// the translation drops or refuses by its type.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Namespace string          `json:"namespace"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// inputPart is one content part of an input message or of a
// function_call_output's output list.
type inputPart struct {
	Type     string  `json:"type"`
	Text     string  `json:"text"`
	Refusal  string  `json:"refusal"`
	ImageURL *string `json:"image_url"`
	FileID   *string `json:"file_id"`
	Detail   string  `json:"detail"`
}

type functionTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
	// A namespace's function tools.
	Tools []json.RawMessage `json:"tools"`
}

// namespaceSep joins a namespace and a function's name into
// the one chat function name: "<namespace>__<name>". The answer's half
// splits only names the request declared (namespacedTools), so a
// plain function whose name holds "__" is left alone.
const namespaceSep = "__"

func flatName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + namespaceSep + name
}

// chatMsg is one chat message before it is written.
type chatMsg struct {
	role       string
	parts      []msgPart
	toolCalls  []inputItem // function_call items of an assistant message
	toolCallID string      // role tool
}

// msgPart is a text part, or an image when url is set.
type msgPart struct {
	text, url, detail string
	image             bool
}

func unsupported(param, format string, args ...any) *translate.Unsupported {
	return &translate.Unsupported{Param: param, Message: fmt.Sprintf(format, args...)}
}

// decodeField unmarshals b into v; a value of the wrong type is an
// *Unsupported naming the field under path.
func decodeField(b []byte, v any, path string) error {
	err := json.Unmarshal(b, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		p := path
		if te.Field != "" {
			if p != "" {
				p += "."
			}
			p += te.Field
		}
		if p == "" {
			return fmt.Errorf("translate: the responses request body is a JSON %s, not an object", te.Value)
		}
		return unsupported(p, "%s: a JSON %s is not valid here", p, te.Value)
	}
	if path == "" {
		return fmt.Errorf("translate: responses request body: %w", err)
	}
	return unsupported(path, "%s: %v", path, err)
}

func isNull(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || string(b) == "null"
}

// isNumber accepts a JSON number (already valid JSON).
func isNumber(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && (b[0] == '-' || b[0] >= '0' && b[0] <= '9')
}

// translateRequest translates a Responses API request body into a
// chat completions request body for model o.Model.
func translateRequest(body []byte, o translate.RequestOptions) ([]byte, error) {
	var r responsesRequest
	if err := decodeField(body, &r, ""); err != nil {
		return nil, err
	}
	if err := refuseState(&r); err != nil {
		return nil, err
	}
	var msgs []chatMsg
	if r.Instructions != nil && *r.Instructions != "" {
		msgs = append(msgs, chatMsg{role: "system", parts: []msgPart{{text: *r.Instructions}}})
	}
	msgs, err := inputMessages(msgs, r.Input)
	if err != nil {
		return nil, err
	}

	model := o.Model
	if model == "" {
		model = r.Model
	}
	b := make([]byte, 0, len(body)+256)
	b = append(b, `{"model":`...)
	b = jsonstr.Append(b, model)
	b = append(b, `,"messages":`...)
	b = appendMessages(b, msgs)
	mark := len(b)
	if b, err = appendTools(b, r.Tools, o); err != nil {
		return nil, err
	}
	tools := len(b) > mark
	if !isNull(r.ToolChoice) {
		mark = len(b)
		if b, err = appendToolChoice(b, r.ToolChoice, o.Hosted); err != nil {
			return nil, err
		}
		if !tools {
			// Checked, but not sent: OpenAI refuses a tool_choice
			// without tools (none given, or every one dropped).
			b = b[:mark]
		}
	}
	if b, err = appendOptions(b, &r, o, tools); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// refuseState refuses server-side state the chat completions
// family has no place for.
func refuseState(r *responsesRequest) error {
	switch {
	case r.PreviousResponseID != nil && *r.PreviousResponseID != "":
		return unsupported("previous_response_id", "previous_response_id: this model's backend speaks chat completions, which keeps no responses; send the whole conversation in input instead")
	case !isNull(r.Conversation):
		return unsupported("conversation", "conversation: this model's backend speaks chat completions, which keeps no conversations; send the whole conversation in input instead")
	case r.Background != nil && *r.Background:
		return unsupported("background", "background: this model's backend speaks chat completions, which cannot run a response in the background")
	case !isNull(r.Prompt):
		return unsupported("prompt", "prompt: this model's backend speaks chat completions, which has no stored prompt templates")
	case r.Truncation != nil && *r.Truncation == "auto":
		return unsupported("truncation", `truncation: "auto" is not supported by this model's backend (chat completions); use "disabled"`)
	case r.AccessPrograms != nil && r.AccessPrograms.Cyber != nil && *r.AccessPrograms.Cyber != "standard":
		// Sending the request on with the standard program would answer
		// under other safeguards than the client chose, silently.
		return unsupported("access_programs.cyber", "access_programs.cyber: %q is not available on this model's backend (chat completions serves the standard program only)", *r.AccessPrograms.Cyber)
	}
	return nil
}

// appendOptions appends the request's options after its tools:
// parallel_tool_calls (only with tools, which OpenAI requires of it), the
// text format, the reasoning effort, the output cap, sampling, the end
// user and streaming.
func appendOptions(b []byte, r *responsesRequest, o translate.RequestOptions, tools bool) ([]byte, error) {
	var err error
	if r.ParallelToolCalls != nil && tools {
		b = append(b, `,"parallel_tool_calls":`...)
		b = strconv.AppendBool(b, *r.ParallelToolCalls)
	}
	if r.Text != nil && !isNull(r.Text.Format) {
		if b, err = appendFormat(b, r.Text.Format); err != nil {
			return nil, err
		}
	}
	if r.Reasoning != nil && r.Reasoning.Effort != nil {
		b = append(b, `,"reasoning_effort":`...)
		b = jsonstr.Append(b, *r.Reasoning.Effort)
	}
	for _, f := range []struct {
		name, chat string
		v          json.RawMessage
	}{
		{"max_output_tokens", o.ChatMaxTokens(), r.MaxOutputTokens},
		{"temperature", "temperature", r.Temperature},
		{"top_p", "top_p", r.TopP},
	} {
		if isNull(f.v) {
			continue
		}
		if !isNumber(f.v) {
			return nil, unsupported(f.name, "%s must be a number", f.name)
		}
		b = append(b, `,"`...)
		b = append(b, f.chat...)
		b = append(b, `":`...)
		b = append(b, bytes.TrimSpace(f.v)...)
	}
	user := r.User
	if user == nil || *user == "" {
		user = r.SafetyIdentifier
	}
	if user != nil && *user != "" {
		b = append(b, `,"user":`...)
		b = jsonstr.Append(b, *user)
	}
	if r.Stream != nil && *r.Stream {
		// Always with usage: the ledger reads it from the backend's stream.
		b = append(b, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	return b, nil
}

// inputMessages appends the messages of the request's input: a string
// (one user message) or a list of items.
func inputMessages(msgs []chatMsg, input json.RawMessage) ([]chatMsg, error) {
	input = bytes.TrimSpace(input)
	if isNull(input) {
		return msgs, nil
	}
	if input[0] == '"' {
		var s string
		if err := decodeField(input, &s, "input"); err != nil {
			return nil, err
		}
		return append(msgs, chatMsg{role: "user", parts: []msgPart{{text: s}}}), nil
	}
	var items []json.RawMessage
	if err := decodeField(input, &items, "input"); err != nil {
		return nil, err
	}
	// Images of tool outputs (Codex's view_image) wait for the end of the
	// run of tool messages: chat wants those right after the calling
	// assistant message, and carries images in user messages only.
	var images []msgPart
	for i, raw := range items {
		path := "input[" + strconv.Itoa(i) + "]"
		var it inputItem
		if err := decodeField(raw, &it, path); err != nil {
			return nil, err
		}
		if it.Type != "function_call_output" && len(images) > 0 {
			msgs, images = append(msgs, chatMsg{role: "user", parts: images}), nil
		}
		switch {
		case it.Type == "message" || it.Type == "" && it.Role != "":
			m, err := itemMessage(it, path)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, m)
		case it.Type == "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, unsupported(path+".call_id", "%s: a function_call needs a call_id and a name", path)
			}
			// Consecutive calls, and the assistant message right before
			// them, are one chat assistant message.
			if n := len(msgs); n > 0 && msgs[n-1].role == "assistant" {
				msgs[n-1].toolCalls = append(msgs[n-1].toolCalls, it)
			} else {
				msgs = append(msgs, chatMsg{role: "assistant", toolCalls: []inputItem{it}})
			}
		case it.Type == "function_call_output":
			m, imgs, err := toolOutput(it, path)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, m)
			if len(imgs) > 0 {
				images = append(images, msgPart{text: "[images from the output of tool call " + it.CallID + "]"})
				images = append(images, imgs...)
			}
		case it.Type == "reasoning":
			// Chat completions backends take no reasoning state back.
		case it.Type == "":
			return nil, unsupported(path+".type", "%s: an input item needs a type or a role", path)
		default:
			return nil, unsupported(path+".type", "%s.type: %q items are not supported by this model's backend (chat completions)", path, it.Type)
		}
	}
	if len(images) > 0 {
		msgs = append(msgs, chatMsg{role: "user", parts: images})
	}
	return msgs, nil
}

func itemMessage(it inputItem, path string) (chatMsg, error) {
	m := chatMsg{role: it.Role}
	switch it.Role {
	case "user", "assistant", "system":
	case "developer":
		// Chat relays know "system" more widely than "developer"; both
		// carry the same instructions.
		m.role = "system"
	default:
		return m, unsupported(path+".role", "%s.role: %q is not a message role (user, assistant, system, developer)", path, it.Role)
	}
	content := bytes.TrimSpace(it.Content)
	if isNull(content) {
		return m, unsupported(path+".content", "%s.content is required", path)
	}
	if content[0] == '"' {
		var s string
		if err := decodeField(content, &s, path+".content"); err != nil {
			return m, err
		}
		m.parts = []msgPart{{text: s}}
		return m, nil
	}
	var parts []inputPart
	if err := decodeField(content, &parts, path+".content"); err != nil {
		return m, err
	}
	for j, p := range parts {
		pp := path + ".content[" + strconv.Itoa(j) + "]"
		switch p.Type {
		case "input_text", "output_text":
			m.parts = append(m.parts, msgPart{text: p.Text})
		case "refusal":
			m.parts = append(m.parts, msgPart{text: p.Refusal})
		case "input_image":
			if m.role != "user" {
				return m, unsupported(pp+".type", "%s.type: chat completions takes images in user messages only", pp)
			}
			if p.FileID != nil && *p.FileID != "" {
				return m, unsupported(pp+".file_id", "%s.file_id: images by file id are not supported by this model's backend (chat completions); send image_url", pp)
			}
			if p.ImageURL == nil || *p.ImageURL == "" {
				return m, unsupported(pp+".image_url", "%s.image_url is required", pp)
			}
			detail := p.Detail
			if detail == "original" {
				detail = "high" // chat's closest: no downscaling below high
			}
			m.parts = append(m.parts, msgPart{image: true, url: *p.ImageURL, detail: detail})
		default:
			return m, unsupported(pp+".type", "%s.type: %q content is not supported by this model's backend (chat completions)", pp, p.Type)
		}
	}
	return m, nil
}

// toolOutput is a function_call_output as a tool message
// (its text) and the images it returned, which the caller sends in a user
// message after the run of tool messages.
func toolOutput(it inputItem, path string) (chatMsg, []msgPart, error) {
	m := chatMsg{role: "tool", toolCallID: it.CallID}
	if it.CallID == "" {
		return m, nil, unsupported(path+".call_id", "%s.call_id is required", path)
	}
	out := bytes.TrimSpace(it.Output)
	if isNull(out) {
		return m, nil, unsupported(path+".output", "%s.output is required", path)
	}
	if out[0] == '"' {
		var s string
		if err := decodeField(out, &s, path+".output"); err != nil {
			return m, nil, err
		}
		m.parts = []msgPart{{text: s}}
		return m, nil, nil
	}
	var parts []inputPart
	if err := decodeField(out, &parts, path+".output"); err != nil {
		return m, nil, err
	}
	var images []msgPart
	for j, p := range parts {
		pp := path + ".output[" + strconv.Itoa(j) + "]"
		switch p.Type {
		case "input_text", "output_text":
			m.parts = append(m.parts, msgPart{text: p.Text})
		case "input_image":
			if p.FileID != nil && *p.FileID != "" {
				return m, nil, unsupported(pp+".file_id", "%s.file_id: images by file id are not supported by this model's backend (chat completions); send image_url", pp)
			}
			if p.ImageURL == nil || *p.ImageURL == "" {
				return m, nil, unsupported(pp+".image_url", "%s.image_url is required", pp)
			}
			detail := p.Detail
			if detail == "original" {
				detail = "high"
			}
			images = append(images, msgPart{image: true, url: *p.ImageURL, detail: detail})
		default:
			return m, nil, unsupported(pp+".type", "%s.type: %q tool output is not supported by this model's backend (chat completions takes text and image tool results)", pp, p.Type)
		}
	}
	return m, images, nil
}

func appendMessages(b []byte, msgs []chatMsg) []byte {
	b = append(b, '[')
	for i, m := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"role":`...)
		b = jsonstr.Append(b, m.role)
		b = append(b, `,"content":`...)
		b = appendContent(b, m)
		if m.role == "tool" {
			b = append(b, `,"tool_call_id":`...)
			b = jsonstr.Append(b, m.toolCallID)
		}
		if len(m.toolCalls) > 0 {
			b = append(b, `,"tool_calls":[`...)
			for j, tc := range m.toolCalls {
				if j > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"id":`...)
				b = jsonstr.Append(b, tc.CallID)
				b = append(b, `,"type":"function","function":{"name":`...)
				b = jsonstr.Append(b, flatName(tc.Namespace, tc.Name))
				b = append(b, `,"arguments":`...)
				b = jsonstr.Append(b, tc.Arguments)
				b = append(b, "}}"...)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendContent writes a message's content: one text part as
// a string, several parts (or an image) as a list of chat parts, none as
// null (an assistant message holding only tool calls) or "".
func appendContent(b []byte, m chatMsg) []byte {
	switch {
	case len(m.parts) == 0 && len(m.toolCalls) > 0:
		return append(b, "null"...)
	case len(m.parts) == 0:
		return append(b, `""`...)
	case len(m.parts) == 1 && !m.parts[0].image:
		return jsonstr.Append(b, m.parts[0].text)
	}
	b = append(b, '[')
	for i, p := range m.parts {
		if i > 0 {
			b = append(b, ',')
		}
		if !p.image {
			b = append(b, `{"type":"text","text":`...)
			b = jsonstr.Append(b, p.text)
			b = append(b, '}')
			continue
		}
		b = append(b, `{"type":"image_url","image_url":{"url":`...)
		b = jsonstr.Append(b, p.url)
		if p.detail != "" {
			b = append(b, `,"detail":`...)
			b = jsonstr.Append(b, p.detail)
		}
		b = append(b, "}}"...)
	}
	return append(b, ']')
}

// appendTools writes the chat tools: function tools as they
// are, a namespace's function tools flattened (flatName), and
// tools chat cannot express (hosted tools, custom tools) refused or
// dropped as o.Hosted says.
func appendTools(b []byte, tools []json.RawMessage, o translate.RequestOptions) ([]byte, error) {
	if len(tools) == 0 {
		return b, nil
	}
	start := len(b)
	b = append(b, `,"tools":[`...)
	n := 0
	seen := make(map[string]string, len(tools)) // chat name → the path that declared it
	for i, raw := range tools {
		path := "tools[" + strconv.Itoa(i) + "]"
		var t functionTool
		if err := decodeField(raw, &t, path); err != nil {
			return nil, err
		}
		switch t.Type {
		case "function":
			var err error
			if b, err = appendTool(b, &n, seen, path, "", t); err != nil {
				return nil, err
			}
		case "namespace":
			if t.Name == "" {
				return nil, unsupported(path+".name", "%s.name is required", path)
			}
			for j, inner := range t.Tools {
				ipath := path + ".tools[" + strconv.Itoa(j) + "]"
				var it functionTool
				if err := decodeField(inner, &it, ipath); err != nil {
					return nil, err
				}
				if it.Type != "function" {
					if o.Hosted == translate.DropHosted {
						o.Drop(it.Type)
						continue
					}
					return nil, unsupported(ipath+".type", "%s.type: %q tools are not supported by this model's backend (chat completions takes function tools only)", ipath, it.Type)
				}
				var err error
				if b, err = appendTool(b, &n, seen, ipath, t.Name, it); err != nil {
					return nil, err
				}
			}
		default:
			if o.Hosted == translate.DropHosted {
				o.Drop(t.Type)
				continue
			}
			return nil, unsupported(path+".type", "%s.type: %q tools are not supported by this model's backend (chat completions takes function tools only)", path, t.Type)
		}
	}
	if n == 0 {
		return b[:start], nil // every tool was dropped
	}
	return append(b, ']'), nil
}

// appendTool writes one function tool (of namespace ns, when
// set) as the n-th chat tool; two tools may not end up with one chat name.
func appendTool(b []byte, n *int, seen map[string]string, path, ns string, t functionTool) ([]byte, error) {
	if t.Name == "" {
		return nil, unsupported(path+".name", "%s.name is required", path)
	}
	name := flatName(ns, t.Name)
	if prev, dup := seen[name]; dup {
		return nil, unsupported(path+".name", "%s.name: the function %q has the same chat completions name as %s (namespaced functions are sent as <namespace>__<name>)", path, name, prev)
	}
	seen[name] = path
	if *n > 0 {
		b = append(b, ',')
	}
	*n++
	b = append(b, `{"type":"function","function":{"name":`...)
	b = jsonstr.Append(b, name)
	if t.Description != nil {
		b = append(b, `,"description":`...)
		b = jsonstr.Append(b, *t.Description)
	}
	if !isNull(t.Parameters) {
		b = append(b, `,"parameters":`...)
		b = append(b, bytes.TrimSpace(t.Parameters)...)
	}
	if t.Strict != nil {
		b = append(b, `,"strict":`...)
		b = strconv.AppendBool(b, *t.Strict)
	}
	return append(b, "}}"...), nil
}

func appendToolChoice(b []byte, raw json.RawMessage, hosted translate.HostedPolicy) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if raw[0] == '"' {
		var s string
		if err := decodeField(raw, &s, "tool_choice"); err != nil {
			return nil, err
		}
		switch s {
		case "auto", "none", "required":
		default:
			return nil, unsupported("tool_choice", "tool_choice: %q is not one of auto, none, required", s)
		}
		b = append(b, `,"tool_choice":`...)
		return jsonstr.Append(b, s), nil
	}
	var c struct {
		Type      string `json:"type"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	}
	if err := decodeField(raw, &c, "tool_choice"); err != nil {
		return nil, err
	}
	if c.Type != "function" && hosted == translate.DropHosted {
		return b, nil // it names a tool the request goes without: the backend chooses
	}
	if c.Type != "function" {
		return nil, unsupported("tool_choice.type", "tool_choice.type: %q is not supported by this model's backend (chat completions can force function tools only)", c.Type)
	}
	if c.Name == "" {
		return nil, unsupported("tool_choice.name", "tool_choice.name is required")
	}
	b = append(b, `,"tool_choice":{"type":"function","function":{"name":`...)
	b = jsonstr.Append(b, flatName(c.Namespace, c.Name))
	return append(b, "}}"...), nil
}

func appendFormat(b []byte, raw json.RawMessage) ([]byte, error) {
	var f struct {
		Type        string          `json:"type"`
		Name        *string         `json:"name"`
		Description *string         `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	}
	if err := decodeField(raw, &f, "text.format"); err != nil {
		return nil, err
	}
	switch f.Type {
	case "text":
		return b, nil
	case "json_object":
		return append(b, `,"response_format":{"type":"json_object"}`...), nil
	case "json_schema":
	default:
		return nil, unsupported("text.format.type", "text.format.type: %q is not one of text, json_object, json_schema", f.Type)
	}
	if f.Name == nil || *f.Name == "" {
		return nil, unsupported("text.format.name", "text.format.name is required for json_schema")
	}
	b = append(b, `,"response_format":{"type":"json_schema","json_schema":{"name":`...)
	b = jsonstr.Append(b, *f.Name)
	if f.Description != nil {
		b = append(b, `,"description":`...)
		b = jsonstr.Append(b, *f.Description)
	}
	if !isNull(f.Schema) {
		b = append(b, `,"schema":`...)
		b = append(b, bytes.TrimSpace(f.Schema)...)
	}
	if f.Strict != nil {
		b = append(b, `,"strict":`...)
		b = strconv.AppendBool(b, *f.Strict)
	}
	return append(b, "}}"...), nil
}
