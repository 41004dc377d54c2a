package mockupstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/swarmgate/swarmgate/internal/schema/anthropic"
	"github.com/swarmgate/swarmgate/internal/schema/openai"
)

// Tool calls (Options.ToolCalls), for chat completions and Anthropic
// Messages, in the shapes of the providers' API references.
//
// A request that declares tools (chat: tools[].function.name; Anthropic:
// tools[].name) and whose last turn is not a tool result (chat: the last
// message's role is not "tool"; Anthropic: the last user message has no
// tool_result block) is answered with two parallel calls of the first
// declared tool, arguments ToolCallArguments, ids call_<n>_<i> (chat) or
// toolu_<n>_<i> (Anthropic) where n is the answer's sequence number:
//   - chat JSON: message.content null, message.tool_calls, finish_reason
//     "tool_calls";
//   - chat SSE: a role chunk, then per call a chunk with its index, id,
//     type and name (arguments ""), then the arguments in two chunks,
//     then the finish_reason chunk, the usage chunk when include_usage,
//     "data: [DONE]";
//   - Anthropic JSON: a text block (ToolCallText) and two tool_use
//     blocks, stop_reason "tool_use";
//   - Anthropic SSE: message_start, the text block (start, ping,
//     text_delta, stop), per call content_block_start with input {} and
//     two input_json_delta events then content_block_stop, message_delta
//     (stop_reason tool_use, output_tokens), message_stop.
//
// Usage is the same as a text answer's (Options.CompletionTokens,
// max_tokens, the x-mock-* headers), and the finish stays tool_calls /
// tool_use even when max_tokens cut that count. A request ending in a tool
// result is answered with text, as without tools. tool_choice,
// parallel_tool_calls and disable_parallel_tool_use are not looked at.

// ToolCallText is the text an Anthropic tool-use answer says before its
// tool_use blocks.
const ToolCallText = "Let me call the tool for both cities."

// toolCallArgs are the two calls' arguments, each in the two pieces it is
// streamed in.
var toolCallArgs = [2][2]string{{`{"city":`, `"Paris"}`}, {`{"city":`, `"Rome"}`}}

// ToolCallArguments returns the arguments of the two parallel tool calls,
// in order: {"city":"Paris"} and {"city":"Rome"}.
func ToolCallArguments() []string {
	out := make([]string, len(toolCallArgs))
	for i, a := range toolCallArgs {
		out[i] = a[0] + a[1]
	}
	return out
}

// conversation is what a chat or Anthropic request's messages hold
// besides text.
type conversation struct {
	toolResults        int  // chat role "tool" messages; Anthropic tool_result blocks
	sawImage           bool // chat image_url part; Anthropic image block
	endsWithToolResult bool // the turn to answer is a tool result
}

// contentBlock is the part of a content array element the mock looks at:
// chat parts ({type: text|image_url|...}) and Anthropic blocks ({type:
// text|image|tool_use|tool_result, content: ...}).
type contentBlock struct {
	Type    string          `json:"type"`
	Content json.RawMessage `json:"content"`
}

func inspectConversation(endpoint string, q *apiRequest) conversation {
	var c conversation
	if endpoint == "responses" {
		return inspectResponsesInput(q.Input)
	}
	if endpoint != "chat" && endpoint != "messages" {
		return c
	}
	for i, m := range q.Messages {
		results := c.inspectContent(m.Content, endpoint == "messages")
		switch {
		case endpoint == "chat" && m.Role == "tool":
			c.toolResults++
			c.endsWithToolResult = i == len(q.Messages)-1
		case endpoint == "chat":
			c.endsWithToolResult = false
		case m.Role == "user":
			c.endsWithToolResult = results > 0
		}
	}
	return c
}

// inspectContent notes the images in a content array (also inside
// Anthropic tool results) and, when anthropic, counts its tool_result
// blocks, which it returns. Strings and malformed content hold neither.
func (c *conversation) inspectContent(raw json.RawMessage, anthropic bool) int {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return 0
	}
	var blocks []contentBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return 0
	}
	results := 0
	for _, b := range blocks {
		switch b.Type {
		case "image_url", "image":
			c.sawImage = true
		case "tool_result":
			if anthropic {
				results++
				c.inspectContent(b.Content, true)
			}
		}
	}
	c.toolResults += results
	return results
}

// toolToCall is the tool a tool-call answer calls (no name for a text
// answer) and its calls' arguments, each in the two pieces it is streamed
// in: a scripted tool's once (Options.ToolScript), else the first declared
// tool's twice (Options.ToolCalls).
func (s *Server) toolToCall(endpoint string, q *apiRequest) (calledTool, [][2]string) {
	if q.convo.endsWithToolResult {
		return calledTool{}, nil
	}
	if t, args, ok := s.scriptedTool(endpoint, q); ok {
		return t, [][2]string{splitArgs(args)}
	}
	if !s.opts.ToolCalls {
		return calledTool{}, nil
	}
	for _, t := range q.Tools {
		switch {
		case endpoint == "chat" && t.Function != nil && t.Function.Name != "":
			return calledTool{name: t.Function.Name}, toolCallArgs[:]
		case endpoint == "messages" && t.Name != "":
			return calledTool{name: t.Name}, toolCallArgs[:]
		}
	}
	return calledTool{}, nil
}

// jsonDelay makes a JSON answer take as long as its stream of n events.
func (s *Server) jsonDelay(r *http.Request, rec *Record, n int) bool {
	if !sleep(r.Context(), s.opts.TTFT+s.opts.InterTokenDelay*time.Duration(max(0, n-1))) {
		s.update(func() { rec.Outcome = "canceled" })
		return false
	}
	return true
}

// answerToolCalls answers a chat completion with parallel calls of tool,
// one per element of args.
func (s *Server) answerToolCalls(w http.ResponseWriter, r *http.Request, rec *Record, q *apiRequest, u usage, tool string, toolArgs [][2]string, id uint64, created int64, resetAfter int) {
	s.update(func() { rec.ToolCalls = len(toolArgs) })
	finish := "tool_calls"
	chunk := func(delta any, finish *string, usage any, empty bool) openai.ChatCompletion {
		c := openai.ChatCompletion{ID: fmt.Sprintf("chatcmpl-mock-%d", id), Object: "chat.completion.chunk", Created: created,
			Model: q.Model, SystemFingerprint: "fp_mock", Usage: usage, Choices: []openai.ChatChoice{}}
		if !empty {
			c.Choices = []openai.ChatChoice{{Delta: delta, FinishReason: finish}}
		}
		return c
	}
	var perChunk any
	if q.includeUsage() {
		perChunk = nullUsage{}
	}
	// The first delta states role, content and refusal (null), as
	// OpenAI's does.
	events := []sseEvent{{data: chunk(&openai.ChatMessage{Role: "assistant"}, nil, perChunk, false)}}
	calls := make([]openai.ToolCall, len(toolArgs))
	for i, args := range toolArgs {
		callID := fmt.Sprintf("call_%d_%d", id, i)
		calls[i] = openai.ToolCall{ID: callID, Type: "function", Function: openai.FunctionCall{Name: tool, Arguments: args[0] + args[1]}}
		events = append(events, sseEvent{data: chunk(&openai.ChatDelta{ToolCalls: []openai.ToolCallDelta{{Index: i, ID: callID, Type: "function",
			Function: openai.FunctionDelta{Name: tool}}}}, nil, perChunk, false)})
		for _, piece := range args {
			events = append(events, sseEvent{data: chunk(&openai.ChatDelta{ToolCalls: []openai.ToolCallDelta{{Index: i,
				Function: openai.FunctionDelta{Arguments: piece}}}}, nil, perChunk, false)})
		}
	}
	events = append(events, sseEvent{data: chunk(&openai.ChatDelta{}, &finish, perChunk, false)})
	if q.includeUsage() {
		events = append(events, sseEvent{data: chunk(nil, nil, u.json(), true)})
	}
	if q.Stream {
		s.writeEvents(w, r, rec, events, resetAfter, "data: [DONE]\n\n")
		return
	}
	if !s.jsonDelay(r, rec, len(events)) {
		return
	}
	s.writeJSON(w, rec, openai.ChatCompletion{
		ID: fmt.Sprintf("chatcmpl-mock-%d", id), Object: "chat.completion", Created: created, Model: q.Model,
		SystemFingerprint: "fp_mock",
		Choices:           []openai.ChatChoice{{Message: &openai.ChatMessage{Role: "assistant", ToolCalls: calls}, FinishReason: &finish}},
		Usage:             u.json(),
	}, resetAfter >= 0)
}

// answerToolUse answers an Anthropic message with a text block and
// parallel tool_use blocks of tool, one per element of args.
func (s *Server) answerToolUse(w http.ResponseWriter, r *http.Request, rec *Record, q *apiRequest, u usage, tool string, toolArgs [][2]string, id uint64, resetAfter int) {
	w.Header().Set("Request-Id", fmt.Sprintf("req_mock_%d", id))
	s.update(func() { rec.ToolCalls = len(toolArgs) })
	stop := "tool_use"
	msg := anthropic.Message{ID: fmt.Sprintf("msg_mock_%x_%d", s.instance, id), Type: "message", Role: "assistant", Model: q.Model,
		Content: []any{anthropic.TextBlock{Type: "text", Text: ToolCallText}}, StopReason: &stop, Usage: u.anthropic(u.completion)}
	start := msg
	start.Content, start.StopReason, start.Usage = []any{}, nil, u.anthropic(1)
	type m = map[string]any
	events := []sseEvent{
		{"message_start", m{"type": "message_start", "message": start}},
		{"content_block_start", m{"type": "content_block_start", "index": 0, "content_block": anthropic.TextBlock{Type: "text"}}},
		{"ping", m{"type": "ping"}},
		{"content_block_delta", m{"type": "content_block_delta", "index": 0, "delta": m{"type": "text_delta", "text": ToolCallText}}},
		{"content_block_stop", m{"type": "content_block_stop", "index": 0}},
	}
	for i, args := range toolArgs {
		block := anthropic.ToolUseBlock{Type: "tool_use", ID: fmt.Sprintf("toolu_%d_%d", id, i), Name: tool, Input: json.RawMessage(args[0] + args[1])}
		msg.Content = append(msg.Content, block)
		block.Input = json.RawMessage("{}")
		events = append(events, sseEvent{"content_block_start", m{"type": "content_block_start", "index": i + 1, "content_block": block}})
		for _, piece := range args {
			events = append(events, sseEvent{"content_block_delta", m{"type": "content_block_delta", "index": i + 1,
				"delta": m{"type": "input_json_delta", "partial_json": piece}}})
		}
		events = append(events, sseEvent{"content_block_stop", m{"type": "content_block_stop", "index": i + 1}})
	}
	events = append(events,
		sseEvent{"message_delta", m{"type": "message_delta", "delta": m{"stop_reason": stop, "stop_sequence": nil},
			"usage": m{"output_tokens": u.completion}}},
		sseEvent{"message_stop", m{"type": "message_stop"}},
	)
	if q.Stream {
		s.writeEvents(w, r, rec, events, resetAfter, "")
		return
	}
	if !s.jsonDelay(r, rec, len(events)) {
		return
	}
	s.writeJSON(w, rec, msg, resetAfter >= 0)
}
