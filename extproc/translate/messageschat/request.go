// Package messageschat translates an Anthropic Messages client's requests
// for a chat completions backend, and the backend's answers back. The
// request half is request.go, the answer's response.go. The mapping, what
// is dropped and what is refused: docs/translation-messages-chat.md.
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
		Request:     messagesChatRequest,
		NewResponse: newMessagesChatResponse,
	}
}

// messagesChatIn is the part of a Messages request the translation reads.
// Fields it does not name are dropped (the Messages API's hints such as
// thinking, service_tier, speed, inference_geo, diagnostics, cache_control).
type messagesChatIn struct {
	System        json.RawMessage       `json:"system"`
	Messages      []messagesChatInTurn  `json:"messages"`
	Tools         []messagesChatInTool  `json:"tools"`
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

type messagesChatInTurn struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// messagesChatInBlock is any content block; Type says which fields apply.
type messagesChatInBlock struct {
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

type messagesChatInTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Strict      json.RawMessage `json:"strict"`
}

func messagesChatRefuse(param, format string, args ...any) *translate.Unsupported {
	return &translate.Unsupported{Param: param, Message: param + ": " + fmt.Sprintf(format, args...)}
}

// messagesChatPresent is a raw field the client set to something other
// than null.
func messagesChatPresent(r json.RawMessage) bool {
	return len(r) > 0 && !bytes.Equal(r, []byte("null"))
}

func messagesChatRequest(body []byte, o translate.RequestOptions) ([]byte, error) {
	var in messagesChatIn
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("translate: reading the Messages request: %w", err)
	}
	if err := messagesChatRefuseOptions(&in); err != nil {
		return nil, err
	}
	out := openai.ChatRequest{Model: o.Model, Messages: make([]openai.ChatRequestMessage, 0, len(in.Messages)+1)}
	if sys, err := messagesChatSystem(in.System, "system"); err != nil {
		return nil, err
	} else if sys != nil {
		out.Messages = append(out.Messages, openai.ChatRequestMessage{Role: "system", Content: sys})
	}
	for i, turn := range in.Messages {
		var err error
		if out.Messages, err = messagesChatTurn(out.Messages, i, turn, o.Hosted); err != nil {
			return nil, err
		}
	}
	if n := len(in.Messages); n > 0 && in.Messages[n-1].Role == "assistant" {
		return nil, messagesChatRefuse("messages["+strconv.Itoa(n-1)+"].role",
			"a final assistant message (a prefill the answer continues) has no equivalent in chat completions")
	}
	if err := messagesChatTools(&in, &out, o); err != nil {
		return nil, err
	}
	if messagesChatPresent(in.MaxTokens) {
		if o.ChatMaxTokens() == "max_completion_tokens" {
			out.MaxCompletion = in.MaxTokens
		} else {
			out.MaxTokens = in.MaxTokens
		}
	}
	out.Stop = in.StopSequences
	if messagesChatPresent(in.Temperature) {
		out.Temperature = in.Temperature
	}
	if messagesChatPresent(in.TopP) {
		out.TopP = in.TopP
	}
	if in.Metadata != nil && in.Metadata.UserID != nil && *in.Metadata.UserID != "" {
		out.User = in.Metadata.UserID
	}
	if in.Stream {
		// Always ask for the usage chunk: the ledger reads it.
		out.Stream, out.StreamOptions = true, &openai.StreamOptions{IncludeUsage: true}
	}
	return messagesChatMarshal(out)
}

// messagesChatRefuseOptions refuses the request options a chat
// completions backend has no equivalent of.
func messagesChatRefuseOptions(in *messagesChatIn) error {
	switch {
	case messagesChatPresent(in.TopK):
		return messagesChatRefuse("top_k", "chat completions backends take no top_k")
	case messagesChatPresent(in.MCPServers):
		return messagesChatRefuse("mcp_servers", "MCP servers run by the API are not available through a chat completions backend")
	case messagesChatPresent(in.Container):
		return messagesChatRefuse("container", "code execution containers are not available through a chat completions backend")
	case in.OutputConfig != nil && messagesChatPresent(in.OutputConfig.Format):
		return messagesChatRefuse("output_config.format", "structured outputs are not translated to a chat completions backend")
	case messagesChatPresent(in.OutputFormat):
		return messagesChatRefuse("output_format", "structured outputs are not translated to a chat completions backend")
	}
	return nil
}

// messagesChatTools maps tools, tool_choice and disable_parallel_tool_use.
// A server tool or Anthropic-defined tool is refused or, under
// DropHosted, dropped together with a tool_choice that forces it.
func messagesChatTools(in *messagesChatIn, out *openai.ChatRequest, o translate.RequestOptions) error {
	var dropped []string // names of dropped tools, for tool_choice
	for i, t := range in.Tools {
		if t.Type != "" && t.Type != "custom" {
			// A server tool (web search, code execution...) or an
			// Anthropic-defined client tool (computer use, bash, text
			// editor) whose schema only Anthropic's models know.
			if o.Hosted != translate.DropHosted {
				return messagesChatRefuse("tools["+strconv.Itoa(i)+"].type", "the server tool %q is not available through a chat completions backend", t.Type)
			}
			o.Drop(t.Type)
			dropped = append(dropped, t.Name)
			continue
		}
		ot := openai.ChatTool{Type: "function", Function: openai.FunctionTool{Name: t.Name, Description: t.Description}}
		if messagesChatPresent(t.InputSchema) {
			ot.Function.Parameters = t.InputSchema
		}
		if messagesChatPresent(t.Strict) {
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
		return messagesChatRefuse("tool_choice.type", "unknown tool_choice type %q", c.Type)
	}
	if c.DisableParallelToolUse && c.Type != "none" {
		f := false
		out.ParallelToolCalls = &f
	}
	return nil
}

// messagesChatMarshal writes v compactly without HTML escaping, so raw
// schemas and tool inputs keep their bytes.
func messagesChatMarshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// messagesChatSystem is the system prompt: a string, or text blocks (one
// block becomes a string, several stay separate text parts).
func messagesChatSystem(raw json.RawMessage, at string) (any, error) {
	if !messagesChatPresent(raw) {
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
	var blocks []messagesChatInBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, fmt.Errorf("translate: reading %s: %w", at, err)
	}
	var parts []openai.ContentPart
	for j, b := range blocks {
		if b.Type != "text" {
			return nil, messagesChatRefuse(at+"["+strconv.Itoa(j)+"].type", "a system block of type %q cannot be sent to a chat completions backend", b.Type)
		}
		parts = append(parts, openai.ContentPart{Type: "text", Text: b.Text})
	}
	return messagesChatContent(parts), nil
}

// messagesChatContent is a message's content: nil for no parts, a string
// for one text part, the parts otherwise.
func messagesChatContent(parts []openai.ContentPart) any {
	switch {
	case len(parts) == 0:
		return nil
	case len(parts) == 1 && parts[0].Type == "text":
		return parts[0].Text
	}
	return parts
}

// messagesChatTurn appends the chat messages of the i-th Messages turn.
func messagesChatTurn(dst []openai.ChatRequestMessage, i int, turn messagesChatInTurn, hosted translate.HostedPolicy) ([]openai.ChatRequestMessage, error) {
	at := "messages[" + strconv.Itoa(i) + "]"
	switch turn.Role {
	case "user", "assistant":
	case "system":
		// A system turn inside messages (Claude Code sends its environment
		// block so): a chat system message at the same place, so the text
		// keeps its order relative to the turns around it.
		return messagesChatSystemTurn(dst, at, turn.Content)
	default:
		return nil, messagesChatRefuse(at+".role", "unknown role %q", turn.Role)
	}
	if !messagesChatPresent(turn.Content) {
		return nil, messagesChatRefuse(at+".content", "a message needs content")
	}
	if turn.Content[0] == '"' {
		var s string
		if err := json.Unmarshal(turn.Content, &s); err != nil {
			return nil, err
		}
		return append(dst, openai.ChatRequestMessage{Role: turn.Role, Content: s}), nil
	}
	var blocks []messagesChatInBlock
	if err := json.Unmarshal(turn.Content, &blocks); err != nil {
		return nil, fmt.Errorf("translate: reading %s.content: %w", at, err)
	}
	t := messagesChatTurnOut{role: turn.Role, hosted: hosted, dst: dst}
	for j, b := range blocks {
		if err := t.block(at+".content["+strconv.Itoa(j)+"]", b); err != nil {
			return nil, err
		}
	}
	return t.finish(len(blocks) == 0), nil
}

// messagesChatTurnOut collects the chat messages of one Messages turn of
// content blocks: its tool results go out at once as tool messages, the
// rest as the turn's own message (finish).
type messagesChatTurnOut struct {
	role              string
	hosted            translate.HostedPolicy
	dst               []openai.ChatRequestMessage
	parts, toolImages []openai.ContentPart
	calls             []openai.ToolCall
}

// block takes one content block; bat is where it is, for refusals.
func (t *messagesChatTurnOut) block(bat string, b messagesChatInBlock) error {
	switch b.Type {
	case "text":
		t.parts = append(t.parts, openai.ContentPart{Type: "text", Text: b.Text})
	case "image":
		if t.role != "user" {
			return messagesChatRefuse(bat+".type", "an image in an assistant message cannot be sent to a chat completions backend")
		}
		url, err := messagesChatImageURL(bat, b)
		if err != nil {
			return err
		}
		t.parts = append(t.parts, openai.ContentPart{Type: "image_url", ImageURL: &openai.ImageURL{URL: url}})
	case "tool_use":
		if t.role != "assistant" {
			return messagesChatRefuse(bat+".type", "tool_use belongs in an assistant message")
		}
		t.calls = append(t.calls, messagesChatToolCall(b))
	case "tool_result":
		if t.role != "user" {
			return messagesChatRefuse(bat+".type", "tool_result belongs in a user message")
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
			return messagesChatRefuse(bat+".type", "a content block of type %q cannot be sent to a chat completions backend", b.Type)
		}
	default:
		return messagesChatRefuse(bat+".type", "a content block of type %q cannot be sent to a chat completions backend", b.Type)
	}
	return nil
}

// messagesChatToolCall is a tool_use block as a chat tool call, its input
// as a model writes arguments: compact, its members and their order kept.
func messagesChatToolCall(b messagesChatInBlock) openai.ToolCall {
	c := openai.ToolCall{ID: b.ID, Type: "function", Function: openai.FunctionCall{Name: b.Name, Arguments: "{}"}}
	if messagesChatPresent(b.Input) {
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
func (t *messagesChatTurnOut) toolResult(bat string, b messagesChatInBlock) error {
	text, images, err := messagesChatToolResult(bat, b.Content)
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
func (t *messagesChatTurnOut) finish(noBlocks bool) []openai.ChatRequestMessage {
	parts := append(t.toolImages, t.parts...)
	switch {
	case t.role == "assistant":
		m := openai.ChatRequestMessage{Role: "assistant", Content: messagesChatContent(parts), ToolCalls: t.calls}
		if m.Content == nil && len(t.calls) == 0 {
			m.Content = ""
		}
		return append(t.dst, m)
	case len(parts) > 0:
		return append(t.dst, openai.ChatRequestMessage{Role: "user", Content: messagesChatContent(parts)})
	case noBlocks:
		return append(t.dst, openai.ChatRequestMessage{Role: "user", Content: ""})
	}
	return t.dst
}

// messagesChatSystemTurn appends a system turn found inside messages: its
// text (a string or text blocks) as a chat system message.
func messagesChatSystemTurn(dst []openai.ChatRequestMessage, at string, content json.RawMessage) ([]openai.ChatRequestMessage, error) {
	if !messagesChatPresent(content) {
		return dst, nil
	}
	sys, err := messagesChatSystem(content, at+".content")
	if err != nil {
		return nil, err
	}
	if sys == nil {
		return dst, nil
	}
	return append(dst, openai.ChatRequestMessage{Role: "system", Content: sys}), nil
}

func messagesChatImageURL(at string, b messagesChatInBlock) (string, error) {
	if b.Source == nil {
		return "", messagesChatRefuse(at+".source", "an image needs a source")
	}
	switch b.Source.Type {
	case "base64":
		return "data:" + b.Source.MediaType + ";base64," + b.Source.Data, nil
	case "url":
		return b.Source.URL, nil
	}
	return "", messagesChatRefuse(at+".source.type", "an image source of type %q cannot be sent to a chat completions backend", b.Source.Type)
}

// messagesChatToolResult is a tool_result's content as the tool message's
// text (a string as it is, text blocks joined by a line break) and its
// images as chat image parts. is_error has no chat equivalent: the text,
// which says what failed, is sent.
func messagesChatToolResult(at string, raw json.RawMessage) (string, []openai.ContentPart, error) {
	if !messagesChatPresent(raw) {
		return "", nil, nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, nil, err
	}
	var blocks []messagesChatInBlock
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
			url, err := messagesChatImageURL(bat, b)
			if err != nil {
				return "", nil, err
			}
			images = append(images, openai.ContentPart{Type: "image_url", ImageURL: &openai.ImageURL{URL: url}})
		default:
			return "", nil, messagesChatRefuse(bat+".type",
				"a tool result block of type %q cannot be sent to a chat completions backend (tool messages carry text, images are moved to a user message)", b.Type)
		}
	}
	return string(text), images, nil
}
