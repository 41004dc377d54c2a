// Package messageschat translates an Anthropic Messages client's requests
// for a chat completions backend, and the backend's answers back. The
// request half is request.go, the answer's response.go and stream.go.
// The mapping, what is dropped and what is refused:
// docs/translation-messages-chat.md.
package messageschat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/schema/anthropic"
	"github.com/swarmgate/swarmgate/internal/schema/openai"
)

// New is the Anthropic Messages client → chat completions backend pair.
func New() *translate.Translator {
	return &translate.Translator{
		From:        config.FamilyAnthropicMessages,
		To:          config.FamilyChatCompletions,
		Path:        "/v1/chat/completions",
		Request:     translateRequest,
		NewResponse: newResponse,
	}
}

// messagesRequest is the part of a Messages request the translation reads.
// Fields it does not name are dropped (the Messages API's hints such as
// thinking, service_tier, speed, inference_geo, diagnostics, cache_control).
type messagesRequest struct {
	System        json.RawMessage       `json:"system"`
	Messages      []inTurn              `json:"messages"`
	Tools         []inTool              `json:"tools"`
	ToolChoice    *anthropic.ToolChoice `json:"tool_choice"`
	MaxTokens     json.RawMessage       `json:"max_tokens"`
	StopSequences []string              `json:"stop_sequences"`
	Temperature   json.RawMessage       `json:"temperature"`
	TopP          json.RawMessage       `json:"top_p"`
	TopK          json.RawMessage       `json:"top_k"`
	Metadata      *struct {
		UserID *string `json:"user_id"`
	} `json:"metadata"`
	Stream       bool            `json:"stream"`
	MCPServers   json.RawMessage `json:"mcp_servers"`
	Container    json.RawMessage `json:"container"`
	OutputConfig *struct {
		Format json.RawMessage `json:"format"`
	} `json:"output_config"`
	OutputFormat json.RawMessage `json:"output_format"`
}

type inTurn struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// inBlock is any content block; Type says which fields apply.
type inBlock struct {
	Type   string `json:"type"`
	Text   string `json:"text"`
	Source *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // tool_result: a string or blocks
}

type inTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Strict      json.RawMessage `json:"strict"`
}

func refuse(param, format string, args ...any) *translate.Unsupported {
	return &translate.Unsupported{Param: param, Message: param + ": " + fmt.Sprintf(format, args...)}
}

// present is a raw field the client set to something other
// than null.
func present(r json.RawMessage) bool {
	return len(r) > 0 && !bytes.Equal(r, []byte("null"))
}

func translateRequest(body []byte, o translate.RequestOptions) ([]byte, error) {
	var in messagesRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("translate: reading the Messages request: %w", err)
	}
	if err := refuseOptions(&in); err != nil {
		return nil, err
	}
	out := openai.ChatRequest{Model: o.Model, Messages: make([]openai.ChatRequestMessage, 0, len(in.Messages)+1)}
	if sys, err := systemContent(in.System, "system"); err != nil {
		return nil, err
	} else if sys != nil {
		out.Messages = append(out.Messages, openai.ChatRequestMessage{Role: "system", Content: sys})
	}
	for i, turn := range in.Messages {
		var err error
		if out.Messages, err = mapTurn(out.Messages, i, turn, o.Hosted); err != nil {
			return nil, err
		}
	}
	if n := len(in.Messages); n > 0 && in.Messages[n-1].Role == "assistant" {
		return nil, refuse("messages["+strconv.Itoa(n-1)+"].role",
			"a final assistant message (a prefill the answer continues) has no equivalent in chat completions")
	}
	if err := mapTools(&in, &out, o); err != nil {
		return nil, err
	}
	if present(in.MaxTokens) {
		if o.ChatMaxTokens() == "max_completion_tokens" {
			out.MaxCompletion = in.MaxTokens
		} else {
			out.MaxTokens = in.MaxTokens
		}
	}
	out.Stop = in.StopSequences
	if present(in.Temperature) {
		out.Temperature = in.Temperature
	}
	if present(in.TopP) {
		out.TopP = in.TopP
	}
	if in.Metadata != nil && in.Metadata.UserID != nil && *in.Metadata.UserID != "" {
		out.User = in.Metadata.UserID
	}
	if in.Stream {
		// Always ask for the usage chunk: the ledger reads it.
		out.Stream, out.StreamOptions = true, &openai.StreamOptions{IncludeUsage: true}
	}
	return marshal(out)
}

// refuseOptions refuses the request options a chat
// completions backend has no equivalent of.
func refuseOptions(in *messagesRequest) error {
	switch {
	case present(in.TopK):
		return refuse("top_k", "chat completions backends take no top_k")
	case present(in.MCPServers):
		return refuse("mcp_servers", "MCP servers run by the API are not available through a chat completions backend")
	case present(in.Container):
		return refuse("container", "code execution containers are not available through a chat completions backend")
	case in.OutputConfig != nil && present(in.OutputConfig.Format):
		return refuse("output_config.format", "structured outputs are not translated to a chat completions backend")
	case present(in.OutputFormat):
		return refuse("output_format", "structured outputs are not translated to a chat completions backend")
	}
	return nil
}

// mapTools maps tools, tool_choice and disable_parallel_tool_use.
// A server tool or Anthropic-defined tool is refused or, under
// DropHosted, dropped together with a tool_choice that forces it.
func mapTools(in *messagesRequest, out *openai.ChatRequest, o translate.RequestOptions) error {
	var dropped []string // names of dropped tools, for tool_choice
	for i, t := range in.Tools {
		if t.Type != "" && t.Type != "custom" {
			// A server tool (web search, code execution...) or an
			// Anthropic-defined client tool (computer use, bash, text
			// editor) whose schema only Anthropic's models know.
			if o.Hosted != translate.DropHosted {
				return refuse("tools["+strconv.Itoa(i)+"].type", "the server tool %q is not available through a chat completions backend", t.Type)
			}
			o.Drop(t.Type)
			dropped = append(dropped, t.Name)
			continue
		}
		ot := openai.ChatTool{Type: "function", Function: openai.FunctionTool{Name: t.Name, Description: t.Description}}
		if present(t.InputSchema) {
			ot.Function.Parameters = t.InputSchema
		}
		if present(t.Strict) {
			ot.Function.Strict = t.Strict
		}
		out.Tools = append(out.Tools, ot)
	}
	c := in.ToolChoice
	if c == nil || len(out.Tools) == 0 {
		return nil
	}
	switch c.Type {
	case "auto":
		out.ToolChoice = "auto"
	case "any":
		out.ToolChoice = "required"
	case "none":
		out.ToolChoice = "none"
	case "tool":
		if slices.Contains(dropped, c.Name) {
			break // the tool it forces was dropped: the backend chooses
		}
		out.ToolChoice = openai.ToolChoiceFunction{Type: "function", Function: openai.FunctionName{Name: c.Name}}
	default:
		return refuse("tool_choice.type", "unknown tool_choice type %q", c.Type)
	}
	if c.DisableParallelToolUse && c.Type != "none" {
		f := false
		out.ParallelToolCalls = &f
	}
	return nil
}

// marshal writes v compactly without HTML escaping, so raw
// schemas and tool inputs keep their bytes.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// systemContent is the system prompt: a string, or text blocks (one
// block becomes a string, several stay separate text parts).
func systemContent(raw json.RawMessage, at string) (any, error) {
	if !present(raw) {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		if s == "" {
			return nil, nil
		}
		return s, nil
	}
	var blocks []inBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, fmt.Errorf("translate: reading %s: %w", at, err)
	}
	var parts []openai.ContentPart
	for j, b := range blocks {
		if b.Type != "text" {
			return nil, refuse(at+"["+strconv.Itoa(j)+"].type", "a system block of type %q cannot be sent to a chat completions backend", b.Type)
		}
		parts = append(parts, openai.ContentPart{Type: "text", Text: b.Text})
	}
	return messageContent(parts), nil
}

// messageContent is a message's content: nil for no parts, a string
// for one text part, the parts otherwise.
func messageContent(parts []openai.ContentPart) any {
	switch {
	case len(parts) == 0:
		return nil
	case len(parts) == 1 && parts[0].Type == "text":
		return parts[0].Text
	}
	return parts
}

// mapTurn appends the chat messages of the i-th Messages turn.
func mapTurn(dst []openai.ChatRequestMessage, i int, turn inTurn, hosted translate.HostedPolicy) ([]openai.ChatRequestMessage, error) {
	at := "messages[" + strconv.Itoa(i) + "]"
	switch turn.Role {
	case "user", "assistant":
	case "system":
		// A system turn inside messages (Claude Code sends its environment
		// block so): a chat system message at the same place, so the text
		// keeps its order relative to the turns around it.
		return systemTurn(dst, at, turn.Content)
	default:
		return nil, refuse(at+".role", "unknown role %q", turn.Role)
	}
	if !present(turn.Content) {
		return nil, refuse(at+".content", "a message needs content")
	}
	if turn.Content[0] == '"' {
		var s string
		if err := json.Unmarshal(turn.Content, &s); err != nil {
			return nil, err
		}
		return append(dst, openai.ChatRequestMessage{Role: turn.Role, Content: s}), nil
	}
	var blocks []inBlock
	if err := json.Unmarshal(turn.Content, &blocks); err != nil {
		return nil, fmt.Errorf("translate: reading %s.content: %w", at, err)
	}
	t := turnOut{role: turn.Role, hosted: hosted, dst: dst}
	for j, b := range blocks {
		if err := t.block(at+".content["+strconv.Itoa(j)+"]", b); err != nil {
			return nil, err
		}
	}
	return t.finish(len(blocks) == 0), nil
}

// turnOut collects the chat messages of one Messages turn of
// content blocks: its tool results go out at once as tool messages, the
// rest as the turn's own message (finish).
type turnOut struct {
	role              string
	hosted            translate.HostedPolicy
	dst               []openai.ChatRequestMessage
	parts, toolImages []openai.ContentPart
	calls             []openai.ToolCall
}

// block takes one content block; bat is where it is, for refusals.
func (t *turnOut) block(bat string, b inBlock) error {
	switch b.Type {
	case "text":
		t.parts = append(t.parts, openai.ContentPart{Type: "text", Text: b.Text})
	case "image":
		if t.role != "user" {
			return refuse(bat+".type", "an image in an assistant message cannot be sent to a chat completions backend")
		}
		url, err := imageURL(bat, b)
		if err != nil {
			return err
		}
		t.parts = append(t.parts, openai.ContentPart{Type: "image_url", ImageURL: &openai.ImageURL{URL: url}})
	case "tool_use":
		if t.role != "assistant" {
			return refuse(bat+".type", "tool_use belongs in an assistant message")
		}
		t.calls = append(t.calls, toolCall(b))
	case "tool_result":
		if t.role != "user" {
			return refuse(bat+".type", "tool_result belongs in a user message")
		}
		return t.toolResult(bat, b)
	case "thinking", "redacted_thinking":
		// The backend's model did not write them and cannot read them.
	case "server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
		"bash_code_execution_tool_result", "text_editor_code_execution_tool_result", "tool_search_tool_result",
		"mcp_tool_use", "mcp_tool_result", "container_upload":
		// A hosted tool's run, from an earlier answer of a native
		// backend: history the chat backend cannot replay.
		if t.hosted != translate.DropHosted {
			return refuse(bat+".type", "a content block of type %q cannot be sent to a chat completions backend", b.Type)
		}
	default:
		return refuse(bat+".type", "a content block of type %q cannot be sent to a chat completions backend", b.Type)
	}
	return nil
}

// toolCall is a tool_use block as a chat tool call, its input
// as a model writes arguments: compact, its members and their order kept.
func toolCall(b inBlock) openai.ToolCall {
	c := openai.ToolCall{ID: b.ID, Type: "function", Function: openai.FunctionCall{Name: b.Name, Arguments: "{}"}}
	if present(b.Input) {
		var buf bytes.Buffer
		if json.Compact(&buf, b.Input) == nil {
			c.Function.Arguments = buf.String()
		}
	}
	return c
}

// toolResult appends a tool_result as a tool message. Chat wants the tool
// messages right after the assistant message that called them: before the
// rest of this turn.
func (t *turnOut) toolResult(bat string, b inBlock) error {
	text, images, err := toolResultContent(bat, b.Content)
	if err != nil {
		return err
	}
	t.dst = append(t.dst, openai.ChatRequestMessage{Role: "tool", Content: text, ToolCallID: b.ToolUseID})
	if len(images) > 0 {
		// Tool messages carry text only: the images (a screenshot the
		// Read tool returned) follow in the turn's user message,
		// labelled with the call they came from.
		t.toolImages = append(t.toolImages, openai.ContentPart{Type: "text", Text: "[images from the result of tool call " + b.ToolUseID + "]"})
		t.toolImages = append(t.toolImages, images...)
	}
	return nil
}

// finish appends the turn's own message: the assistant's text and tool
// calls, or the user's tool-result images and parts (an empty user turn
// stays one, empty).
func (t *turnOut) finish(noBlocks bool) []openai.ChatRequestMessage {
	parts := append(t.toolImages, t.parts...)
	switch {
	case t.role == "assistant":
		m := openai.ChatRequestMessage{Role: "assistant", Content: messageContent(parts), ToolCalls: t.calls}
		if m.Content == nil && len(t.calls) == 0 {
			m.Content = ""
		}
		return append(t.dst, m)
	case len(parts) > 0:
		return append(t.dst, openai.ChatRequestMessage{Role: "user", Content: messageContent(parts)})
	case noBlocks:
		return append(t.dst, openai.ChatRequestMessage{Role: "user", Content: ""})
	}
	return t.dst
}

// systemTurn appends a system turn found inside messages: its
// text (a string or text blocks) as a chat system message.
func systemTurn(dst []openai.ChatRequestMessage, at string, content json.RawMessage) ([]openai.ChatRequestMessage, error) {
	if !present(content) {
		return dst, nil
	}
	sys, err := systemContent(content, at+".content")
	if err != nil {
		return nil, err
	}
	if sys == nil {
		return dst, nil
	}
	return append(dst, openai.ChatRequestMessage{Role: "system", Content: sys}), nil
}

func imageURL(at string, b inBlock) (string, error) {
	if b.Source == nil {
		return "", refuse(at+".source", "an image needs a source")
	}
	switch b.Source.Type {
	case "base64":
		return "data:" + b.Source.MediaType + ";base64," + b.Source.Data, nil
	case "url":
		return b.Source.URL, nil
	}
	return "", refuse(at+".source.type", "an image source of type %q cannot be sent to a chat completions backend", b.Source.Type)
}

// toolResultContent is a tool_result's content as the tool message's
// text (a string as it is, text blocks joined by a line break) and its
// images as chat image parts. is_error has no chat equivalent: the text,
// which says what failed, is sent.
func toolResultContent(at string, raw json.RawMessage) (string, []openai.ContentPart, error) {
	if !present(raw) {
		return "", nil, nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, nil, err
	}
	var blocks []inBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", nil, fmt.Errorf("translate: reading %s.content: %w", at, err)
	}
	var text []byte
	var images []openai.ContentPart
	texts := 0
	for k, b := range blocks {
		bat := at + ".content[" + strconv.Itoa(k) + "]"
		switch b.Type {
		case "text":
			if texts > 0 {
				text = append(text, '\n')
			}
			texts++
			text = append(text, b.Text...)
		case "image":
			url, err := imageURL(bat, b)
			if err != nil {
				return "", nil, err
			}
			images = append(images, openai.ContentPart{Type: "image_url", ImageURL: &openai.ImageURL{URL: url}})
		default:
			return "", nil, refuse(bat+".type",
				"a tool result block of type %q cannot be sent to a chat completions backend (tool messages carry text, images are moved to a user message)", b.Type)
		}
	}
	return string(text), images, nil
}
