package messageschat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/internal/jsonscan"
	"github.com/swarmgate/swarmgate/internal/schema/anthropic"
	"github.com/swarmgate/swarmgate/internal/schema/openai"
)

// The answer half of Anthropic Messages client → chat completions
// backend: a chat completion written as a Messages answer, the message
// object here and its event stream in stream.go.

func newResponse(o translate.ResponseOptions) translate.Response {
	switch {
	case o.Status >= 400:
		return translate.NewErrorResponse(o.Status, family.Anthropic)
	case o.Stream:
		return &sseResponse{o: o}
	}
	return &jsonResponse{o: o}
}

// anthropicUsage is a chat completion's usage as Anthropic states it:
// input_tokens counts only the prompt tokens not read from the cache.
// Chat backends report no cache writes.
func anthropicUsage(u *openai.Usage) anthropic.Usage {
	cached := min(max(u.CachedTokens(), 0), max(u.PromptTokens, 0))
	return anthropic.Usage{
		InputTokens:          max(u.PromptTokens, 0) - cached,
		CacheReadInputTokens: cached,
		OutputTokens:         u.CompletionTokens,
	}
}

// stopReason maps a chat finish_reason to a Messages
// stop_reason; called says the answer has a tool call. Chat does not say
// which stop sequence ended the answer, so a stop sequence reads as
// end_turn. Some backends (OpenAI with a named tool_choice, vLLM, Ollama,
// Gemini) end tool calls with stop: an answer with a tool_use block that
// stopped is tool_use, or the client never runs the tool.
func stopReason(finish string, called bool) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls", "function_call":
		return "tool_use"
	case "content_filter":
		return "refusal"
	}
	if called {
		return "tool_use"
	}
	return "end_turn"
}

// messageID is "msg_" and the chat id without its "chatcmpl-"
// prefix, or the gateway's request id when the backend sent none.
func messageID(id, requestID string) string {
	id, _ = strings.CutPrefix(id, "chatcmpl-")
	if id == "" {
		id = requestID
	}
	return "msg_" + id
}

type jsonResponse struct {
	o    translate.ResponseOptions
	buf  []byte
	over bool
}

type chatAnswer struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Content      *string              `json:"content"`
			Refusal      *string              `json:"refusal"`
			ToolCalls    []openai.ToolCall    `json:"tool_calls"`
			FunctionCall *openai.FunctionCall `json:"function_call"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *openai.Usage `json:"usage"`
}

func (*jsonResponse) Done() bool { return false }

func (r *jsonResponse) Write(dst, chunk []byte, end bool) ([]byte, error) {
	if !r.over {
		if len(r.buf)+len(chunk) > translate.MaxBuffered {
			r.over, r.buf = true, nil
		} else {
			r.buf = append(r.buf, chunk...)
		}
	}
	if !end {
		return dst, nil
	}
	if r.over {
		return dst, errors.New("translate: the backend's chat completion exceeds 16 MiB")
	}
	var a chatAnswer
	if err := json.Unmarshal(r.buf, &a); err != nil {
		return dst, fmt.Errorf("translate: reading the backend's chat completion: %w", err)
	}
	if len(a.Choices) == 0 {
		return dst, errors.New("translate: the backend's chat completion has no choices")
	}
	c := &a.Choices[0]
	for i := range a.Choices {
		if a.Choices[i].Index == 0 {
			c = &a.Choices[i]
			break
		}
	}
	called := len(c.Message.ToolCalls) > 0 || c.Message.FunctionCall != nil
	stop := stopReason(c.FinishReason, called)
	m := anthropic.Message{
		ID: messageID(a.ID, r.o.RequestID), Type: "message", Role: "assistant", Model: a.Model,
		Content: []any{}, StopReason: &stop,
	}
	if a.Usage != nil {
		m.Usage = anthropicUsage(a.Usage)
	}
	// A refusal is the model's answer in words: it is the text.
	for _, s := range []*string{c.Message.Content, c.Message.Refusal} {
		if s != nil && *s != "" {
			m.Content = append(m.Content, anthropic.TextBlock{Type: "text", Text: *s})
		}
	}
	for i, tc := range c.Message.ToolCalls {
		id := tc.ID
		if id == "" {
			id = toolID(r.o.RequestID, i)
		}
		m.Content = append(m.Content, anthropic.ToolUseBlock{Type: "tool_use", ID: id, Name: tc.Function.Name, Input: toolInput(tc.Function.Arguments)})
	}
	if fc := c.Message.FunctionCall; fc != nil && len(c.Message.ToolCalls) == 0 {
		m.Content = append(m.Content, anthropic.ToolUseBlock{Type: "tool_use", ID: toolID(r.o.RequestID, 0), Name: fc.Name, Input: toolInput(fc.Arguments)})
	}
	b, err := marshal(m)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// toolID names a tool call the backend gave no id.
func toolID(requestID string, i int) string {
	return "toolu_" + requestID + "_" + strconv.Itoa(i)
}

// toolInput is a tool call's arguments as a tool_use input, which
// must be an object: empty arguments are {}; arguments that are not a JSON
// object (a model's malformed call) are kept as text under "arguments",
// so the client sees what the model wrote and its schema check fails
// instead of its JSON parser.
func toolInput(args string) json.RawMessage {
	t := bytes.TrimSpace([]byte(args))
	if len(t) == 0 {
		return json.RawMessage("{}")
	}
	if t[0] == '{' && jsonscan.Valid(t) {
		return t
	}
	b, _ := json.Marshal(map[string]string{"arguments": args})
	return b
}
