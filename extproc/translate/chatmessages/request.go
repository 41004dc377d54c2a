// Package chatmessages translates a chat completions client's requests for
// an Anthropic Messages backend, and the backend's answers back. The
// mapping, what is dropped and what is refused are in
// docs/translation-chat-messages.md; request.go follows it field by field,
// response.go and stream.go write the answer.
package chatmessages

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/jsonscan"
	"github.com/swarmgate/swarmgate/internal/schema/anthropic"
	"github.com/swarmgate/swarmgate/internal/schema/openai"
)

// New is the chat completions client → Anthropic Messages backend pair.
func New() *translate.Translator {
	return &translate.Translator{
		From:        config.FamilyChatCompletions,
		To:          config.FamilyAnthropicMessages,
		Path:        "/v1/messages",
		Request:     translateRequest,
		NewResponse: newResponse,
	}
}

// fallbackMaxTokens is sent as max_tokens when neither the
// client nor RequestOptions.DefaultMaxTokens names a cap: Anthropic refuses
// a request without one.
const fallbackMaxTokens = 4096

// chatRequest is the part of a chat completions request this
// translation reads. Fields it does not name (seed, service_tier, store,
// metadata, reasoning_effort, stream_options, …) are dropped by not being
// read. Polymorphic or refused-when-present fields stay raw.
type chatRequest struct {
	Messages            []chatMessage              `json:"messages"`
	MaxCompletionTokens *int                       `json:"max_completion_tokens"`
	MaxTokens           *int                       `json:"max_tokens"`
	Stop                json.RawMessage            `json:"stop"`
	Temperature         *float64                   `json:"temperature"`
	TopP                *float64                   `json:"top_p"`
	N                   *int                       `json:"n"`
	Logprobs            *bool                      `json:"logprobs"`
	TopLogprobs         *int                       `json:"top_logprobs"`
	Audio               json.RawMessage            `json:"audio"`
	Modalities          []string                   `json:"modalities"`
	ResponseFormat      json.RawMessage            `json:"response_format"`
	Prediction          json.RawMessage            `json:"prediction"`
	PresencePenalty     *float64                   `json:"presence_penalty"`
	FrequencyPenalty    *float64                   `json:"frequency_penalty"`
	LogitBias           map[string]json.RawMessage `json:"logit_bias"`
	WebSearchOptions    json.RawMessage            `json:"web_search_options"`
	User                *string                    `json:"user"`
	SafetyIdentifier    *string                    `json:"safety_identifier"`
	Tools               []openai.ChatTool          `json:"tools"`
	ToolChoice          json.RawMessage            `json:"tool_choice"`
	ParallelToolCalls   *bool                      `json:"parallel_tool_calls"`
	Stream              bool                       `json:"stream"`
	Functions           json.RawMessage            `json:"functions"`
	FunctionCall        json.RawMessage            `json:"function_call"`
}

type chatMessage struct {
	Role         string            `json:"role"`
	Content      json.RawMessage   `json:"content"`
	Refusal      *string           `json:"refusal"`
	ToolCalls    []openai.ToolCall `json:"tool_calls"`
	ToolCallID   string            `json:"tool_call_id"`
	FunctionCall json.RawMessage   `json:"function_call"`
	Audio        json.RawMessage   `json:"audio"`
}

func refuse(param, msg string) *translate.Unsupported {
	return &translate.Unsupported{Param: param, Message: msg}
}

// isAbsent: a raw field not sent or sent as null.
func isAbsent(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func translateRequest(body []byte, o translate.RequestOptions) ([]byte, error) {
	var in chatRequest
	if err := json.Unmarshal(body, &in); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, refuse(te.Field, "the request's "+te.Field+" has the wrong type ("+te.Value+")")
		}
		return nil, refuse("", "the request body is not a JSON chat completions request")
	}
	if err := refuseOptions(&in); err != nil {
		return nil, err
	}
	out := anthropic.Request{Model: o.Model, Temperature: in.Temperature, TopP: in.TopP, Stream: in.Stream}

	switch {
	case in.MaxCompletionTokens != nil:
		out.MaxTokens = *in.MaxCompletionTokens
	case in.MaxTokens != nil:
		out.MaxTokens = *in.MaxTokens
	case o.DefaultMaxTokens > 0:
		out.MaxTokens = o.DefaultMaxTokens
	default:
		out.MaxTokens = fallbackMaxTokens
	}

	stop, err := stopSequences(in.Stop)
	if err != nil {
		return nil, err
	}
	out.StopSequences = stop

	switch {
	case in.User != nil && *in.User != "":
		out.Metadata = &anthropic.Metadata{UserID: *in.User}
	case in.SafetyIdentifier != nil && *in.SafetyIdentifier != "":
		out.Metadata = &anthropic.Metadata{UserID: *in.SafetyIdentifier}
	}

	if err := mapTools(&in, &out); err != nil {
		return nil, err
	}
	if err := mapMessages(in.Messages, &out); err != nil {
		return nil, err
	}

	var buf bytes.Buffer
	buf.Grow(len(body) + 256)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&out); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// refuseOptions refuses the request options Anthropic Messages
// has no equivalent of (a silent drop would change the answer's meaning).
func refuseOptions(in *chatRequest) error {
	switch {
	case !isAbsent(in.Functions):
		return refuse("functions", "the deprecated functions parameter is not supported by this backend; use tools")
	case !isAbsent(in.FunctionCall):
		return refuse("function_call", "the deprecated function_call parameter is not supported by this backend; use tool_choice")
	case in.N != nil && *in.N > 1:
		return refuse("n", "this backend returns one choice per request: n must be 1")
	case in.Logprobs != nil && *in.Logprobs:
		return refuse("logprobs", "this backend does not return log probabilities")
	case in.TopLogprobs != nil && *in.TopLogprobs > 0:
		return refuse("top_logprobs", "this backend does not return log probabilities")
	case !isAbsent(in.Audio):
		return refuse("audio", "this backend does not produce audio output")
	case !isAbsent(in.Prediction):
		return refuse("prediction", "this backend does not support predicted outputs")
	case in.PresencePenalty != nil && *in.PresencePenalty != 0:
		return refuse("presence_penalty", "this backend does not support presence_penalty")
	case in.FrequencyPenalty != nil && *in.FrequencyPenalty != 0:
		return refuse("frequency_penalty", "this backend does not support frequency_penalty")
	case len(in.LogitBias) > 0:
		return refuse("logit_bias", "this backend does not support logit_bias")
	case !isAbsent(in.WebSearchOptions):
		return refuse("web_search_options", "this backend does not support web_search_options")
	case in.Temperature != nil && *in.Temperature > 1:
		return refuse("temperature", "this backend takes a temperature between 0 and 1")
	}
	for _, m := range in.Modalities {
		if m == "audio" {
			return refuse("modalities", "this backend does not produce audio output")
		}
	}
	if !isAbsent(in.ResponseFormat) {
		var rf struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(in.ResponseFormat, &rf) != nil || rf.Type != "text" {
			return refuse("response_format", "this backend does not support response_format "+strconv.Quote(rf.Type)+": only text")
		}
	}
	return nil
}

// stopSequences reads stop (a string or an array of strings); empty
// sequences are dropped.
func stopSequences(raw json.RawMessage) ([]string, error) {
	if isAbsent(raw) {
		return nil, nil
	}
	var list []string
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, refuse("stop", "stop must be a string or an array of strings")
		}
		list = []string{s}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, refuse("stop", "stop must be a string or an array of strings")
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// mapTools maps tools, tool_choice and parallel_tool_calls.
func mapTools(in *chatRequest, out *anthropic.Request) error {
	for i, t := range in.Tools {
		if t.Type != "function" {
			return refuse("tools["+strconv.Itoa(i)+"].type", "this backend takes function tools only, not "+strconv.Quote(t.Type))
		}
		schema := t.Function.Parameters
		if isAbsent(schema) {
			schema = json.RawMessage(`{"type":"object"}`)
		} else if schema[0] != '{' {
			return refuse("tools["+strconv.Itoa(i)+"].function.parameters", "a tool's parameters must be a JSON Schema object")
		}
		out.Tools = append(out.Tools, anthropic.Tool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: schema})
	}
	var choice *anthropic.ToolChoice
	if !isAbsent(in.ToolChoice) {
		if in.ToolChoice[0] == '"' {
			var s string
			_ = json.Unmarshal(in.ToolChoice, &s)
			switch s {
			case "none":
				choice = &anthropic.ToolChoice{Type: "none"}
			case "auto":
				choice = &anthropic.ToolChoice{Type: "auto"}
			case "required":
				choice = &anthropic.ToolChoice{Type: "any"}
			default:
				return refuse("tool_choice", "unknown tool_choice "+strconv.Quote(s)+": want none, auto, required or a function")
			}
		} else {
			var c struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if err := json.Unmarshal(in.ToolChoice, &c); err != nil {
				return refuse("tool_choice", "tool_choice must be a string or an object")
			}
			if c.Type != "function" {
				return refuse("tool_choice.type", "this backend takes a tool_choice of type function only, not "+strconv.Quote(c.Type))
			}
			choice = &anthropic.ToolChoice{Type: "tool", Name: c.Function.Name}
		}
	}
	if len(out.Tools) == 0 {
		// No tools: a choice among none means nothing, and Anthropic
		// refuses a tool_choice without tools.
		return nil
	}
	if in.ParallelToolCalls != nil && !*in.ParallelToolCalls {
		if choice == nil {
			choice = &anthropic.ToolChoice{Type: "auto"}
		}
		if choice.Type != "none" {
			choice.DisableParallelToolUse = true
		}
	}
	out.ToolChoice = choice
	return nil
}

// mapMessages maps the conversation: system and developer turns
// to the top-level system text, the rest to alternating user/assistant
// turns (consecutive turns of one role merge).
func mapMessages(msgs []chatMessage, out *anthropic.Request) error {
	var system []string
	last := 0 // the message that wrote the last turn
	for i := range msgs {
		m := &msgs[i]
		p := "messages[" + strconv.Itoa(i) + "]"
		if !isAbsent(m.FunctionCall) {
			return refuse(p+".function_call", "the deprecated function_call is not supported by this backend; use tool_calls")
		}
		var role string
		var blocks []anthropic.ContentBlock
		var err error
		switch m.Role {
		case "system", "developer":
			var text string
			if text, err = textContent(m.Content, p); err != nil {
				return err
			}
			if text != "" {
				system = append(system, text)
			}
			continue
		case "user":
			role = "user"
			blocks, err = userBlocks(m.Content, p)
		case "assistant":
			role = "assistant"
			blocks, err = assistantBlocks(m, p)
		case "tool":
			role = "user"
			blocks, err = toolResult(m, p)
		case "function":
			return refuse(p+".role", "the deprecated function role is not supported by this backend; use tool")
		default:
			return refuse(p+".role", "unknown message role "+strconv.Quote(m.Role))
		}
		if err != nil {
			return err
		}
		if len(blocks) == 0 {
			continue // nothing to say: Anthropic refuses an empty turn
		}
		last = i
		if n := len(out.Messages); n > 0 && out.Messages[n-1].Role == role {
			out.Messages[n-1].Content = append(out.Messages[n-1].Content, blocks...)
		} else {
			out.Messages = append(out.Messages, anthropic.MessageParam{Role: role, Content: blocks})
		}
	}
	if n := len(out.Messages); n > 0 && out.Messages[n-1].Role == "assistant" {
		// Anthropic continues a final assistant turn (a prefill, and a 400
		// if it ends in white space); chat answers after it.
		return refuse("messages["+strconv.Itoa(last)+"].role",
			"a final assistant message has no equivalent in Anthropic Messages, which would continue it (a prefill) instead of answering after it")
	}
	for i := range out.Messages {
		if out.Messages[i].Role == "user" {
			toolResultsFirst(out.Messages[i].Content)
		}
	}
	if out.Messages == nil {
		out.Messages = []anthropic.MessageParam{}
	}
	out.System = strings.Join(system, "\n\n")
	return nil
}

// toolResultsFirst moves a merged user turn's tool_result
// blocks before its other blocks, keeping the order within each kind:
// Anthropic wants the results of the previous turn's tool calls first.
func toolResultsFirst(blocks []anthropic.ContentBlock) {
	if slices.IsSortedFunc(blocks, resultOrder) {
		return
	}
	slices.SortStableFunc(blocks, resultOrder)
}

func resultOrder(a, b anthropic.ContentBlock) int {
	rank := func(x anthropic.ContentBlock) int {
		if x.Type == "tool_result" {
			return 0
		}
		return 1
	}
	return rank(a) - rank(b)
}

// contentParts reads a content field: a string (one text part), an
// array of parts, or null (no parts).
func contentParts(raw json.RawMessage, p string) (text *string, parts []openai.ContentPart, err error) {
	if isAbsent(raw) {
		return nil, nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, refuse(p+".content", "content must be a string or an array of parts")
		}
		return &s, nil, nil
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, nil, refuse(p+".content", "content must be a string or an array of parts")
	}
	return nil, parts, nil
}

// textContent reads a content that may only hold text (system,
// developer), parts joined by a blank line.
func textContent(raw json.RawMessage, p string) (string, error) {
	s, parts, err := contentParts(raw, p)
	if err != nil || s != nil {
		if s != nil {
			return *s, nil
		}
		return "", err
	}
	var texts []string
	for j, part := range parts {
		if part.Type != "text" {
			return "", refuse(p+".content["+strconv.Itoa(j)+"].type", "this message takes text parts only, not "+strconv.Quote(part.Type))
		}
		if part.Text != "" {
			texts = append(texts, part.Text)
		}
	}
	return strings.Join(texts, "\n\n"), nil
}

func textBlock(text string) anthropic.ContentBlock {
	return anthropic.ContentBlock{Type: "text", Text: text}
}

func userBlocks(raw json.RawMessage, p string) ([]anthropic.ContentBlock, error) {
	s, parts, err := contentParts(raw, p)
	if err != nil {
		return nil, err
	}
	if s != nil {
		if *s == "" {
			return nil, nil
		}
		return []anthropic.ContentBlock{textBlock(*s)}, nil
	}
	blocks := make([]anthropic.ContentBlock, 0, len(parts))
	for j, part := range parts {
		pp := p + ".content[" + strconv.Itoa(j) + "]"
		switch part.Type {
		case "text":
			if part.Text != "" {
				blocks = append(blocks, textBlock(part.Text))
			}
		case "image_url":
			if part.ImageURL == nil {
				return nil, refuse(pp+".image_url", "an image_url part needs image_url.url")
			}
			src, err := imageSource(part.ImageURL.URL, pp+".image_url.url")
			if err != nil {
				return nil, err
			}
			blocks = append(blocks, anthropic.ContentBlock{Type: "image", Source: src})
		case "input_audio":
			return nil, refuse(pp+".type", "this backend does not take audio input")
		case "file":
			return nil, refuse(pp+".type", "this backend does not take file parts through chat completions")
		default:
			return nil, refuse(pp+".type", "unknown content part type "+strconv.Quote(part.Type))
		}
	}
	return blocks, nil
}

// imageSource maps an image URL: a base64 data URL to a base64
// source, an http(s) URL to a url source.
func imageSource(url, p string) (*anthropic.ImageSource, error) {
	if rest, ok := strings.CutPrefix(url, "data:"); ok {
		media, data, ok := strings.Cut(rest, ";base64,")
		if !ok || media == "" || strings.Contains(media, ",") {
			return nil, refuse(p, "an image data URL must be data:<media type>;base64,<data>")
		}
		return &anthropic.ImageSource{Type: "base64", MediaType: media, Data: data}, nil
	}
	lower := strings.ToLower(url)
	if strings.HasPrefix(lower, "https://") || strings.HasPrefix(lower, "http://") {
		return &anthropic.ImageSource{Type: "url", URL: url}, nil
	}
	return nil, refuse(p, "an image URL must be an http(s) URL or a base64 data URL")
}

func assistantBlocks(m *chatMessage, p string) ([]anthropic.ContentBlock, error) {
	if !isAbsent(m.Audio) {
		return nil, refuse(p+".audio", "this backend cannot continue from an audio answer")
	}
	s, parts, err := contentParts(m.Content, p)
	if err != nil {
		return nil, err
	}
	blocks := make([]anthropic.ContentBlock, 0, len(parts)+len(m.ToolCalls)+1)
	switch {
	case s != nil:
		if *s != "" {
			blocks = append(blocks, textBlock(*s))
		}
	case parts != nil:
		for j, part := range parts {
			switch part.Type {
			case "text":
				if part.Text != "" {
					blocks = append(blocks, textBlock(part.Text))
				}
			case "refusal":
				if part.Refusal != "" {
					blocks = append(blocks, textBlock(part.Refusal))
				}
			default:
				return nil, refuse(p+".content["+strconv.Itoa(j)+"].type", "an assistant message takes text and refusal parts only, not "+strconv.Quote(part.Type))
			}
		}
	case m.Refusal != nil && *m.Refusal != "":
		blocks = append(blocks, textBlock(*m.Refusal))
	}
	for j, tc := range m.ToolCalls {
		pj := p + ".tool_calls[" + strconv.Itoa(j) + "]"
		if tc.Type != "function" && tc.Type != "" {
			return nil, refuse(pj+".type", "this backend takes function tool calls only, not "+strconv.Quote(tc.Type))
		}
		input, ok := toolInput(tc.Function.Arguments)
		if !ok {
			return nil, refuse(pj+".function.arguments", "tool call arguments must be a JSON object")
		}
		blocks = append(blocks, anthropic.ContentBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: input})
	}
	return blocks, nil
}

// toolInput parses a tool call's arguments string as the
// tool_use input, which must be a JSON object; empty arguments are {}.
func toolInput(args string) (json.RawMessage, bool) {
	b := bytes.TrimSpace([]byte(args))
	if len(b) == 0 {
		return json.RawMessage("{}"), true
	}
	if b[0] != '{' || !jsonscan.Valid(b) {
		return nil, false
	}
	return json.RawMessage(b), true
}

func toolResult(m *chatMessage, p string) ([]anthropic.ContentBlock, error) {
	s, parts, err := contentParts(m.Content, p)
	if err != nil {
		return nil, err
	}
	b := anthropic.ContentBlock{Type: "tool_result", ToolUseID: m.ToolCallID}
	switch {
	case s != nil:
		if *s != "" {
			b.Content = *s
		}
	case len(parts) > 0:
		texts := make([]anthropic.ContentBlock, 0, len(parts))
		for j, part := range parts {
			if part.Type != "text" {
				return nil, refuse(p+".content["+strconv.Itoa(j)+"].type", "a tool message takes text parts only, not "+strconv.Quote(part.Type))
			}
			if part.Text != "" {
				texts = append(texts, textBlock(part.Text))
			}
		}
		if len(texts) > 0 {
			b.Content = texts
		}
	}
	return []anthropic.ContentBlock{b}, nil
}
