package mockupstream

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/swarmgate/swarmgate/internal/config"
)

var weatherSchema = map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}

// chatTurn sends params as JSON or as a stream (include_usage) and returns
// the completion, the stream's accumulation for a stream, and how many
// chunks and finished tool calls the stream had.
func chatTurn(t *testing.T, c openai.Client, params openai.ChatCompletionNewParams, stream bool) (openai.ChatCompletion, int, int) {
	t.Helper()
	ctx := testCtx(t)
	if !stream {
		resp, err := c.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		return *resp, 0, 0
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := c.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	chunks, finished := 0, 0
	for s.Next() {
		if !acc.AddChunk(s.Current()) {
			t.Fatalf("chunk %d does not accumulate: %s", chunks, s.Current().RawJSON())
		}
		chunks++
		if _, ok := acc.JustFinishedToolCall(); ok {
			finished++
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return acc.ChatCompletion, chunks, finished
}

// TestChatToolCalls drives chat completions with tools through the
// official SDK, JSON and stream, tool calls on and off: with calls on, the
// first turn is two parallel calls of the declared tool and the turn that
// carries their results is text; off, both are text as before. Usage is
// a text answer's either way.
func TestChatToolCalls(t *testing.T) {
	tests := []struct {
		name      string
		toolCalls bool
		stream    bool
	}{
		{"json calls", true, false},
		{"stream calls", true, true},
		{"json off", false, false},
		{"stream off", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, Options{Keys: testKeys(), CompletionTokens: 9, TokensPerChunk: 3, ToolCalls: tc.toolCalls})
			c := openai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey(keyA), option.WithMaxRetries(0))
			params := openai.ChatCompletionNewParams{
				Model:    "gpt-4o-mini",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("twelve bytes")},
				Tools: []openai.ChatCompletionToolUnionParam{
					openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather", Parameters: weatherSchema}),
					openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_time", Parameters: weatherSchema}),
				},
			}

			resp, chunks, finished := chatTurn(t, c, params, tc.stream)
			if resp.Usage.PromptTokens != 3 || resp.Usage.CompletionTokens != 9 {
				t.Fatalf("usage %+v", resp.Usage)
			}
			rec := s.Requests()[0]
			if !tc.toolCalls {
				// role + 3 content chunks + finish + usage, as without tools.
				if resp.Choices[0].Message.Content != tokenText(0, 9) || len(resp.Choices[0].Message.ToolCalls) != 0 ||
					resp.Choices[0].FinishReason != "stop" || (tc.stream && chunks != 6) || rec.ToolCalls != 0 {
					t.Fatalf("%d chunks, answer %+v, record %+v", chunks, resp, rec)
				}
				return
			}

			n := strings.TrimPrefix(resp.ID, "chatcmpl-mock-")
			msg := resp.Choices[0].Message
			if resp.Choices[0].FinishReason != "tool_calls" || msg.Content != "" || len(msg.ToolCalls) != 2 {
				t.Fatalf("answer %+v", resp)
			}
			for i, call := range msg.ToolCalls {
				if call.ID != fmt.Sprintf("call_%s_%d", n, i) || call.Type != "function" || call.Function.Name != "get_weather" ||
					call.Function.Arguments != ToolCallArguments()[i] {
					t.Fatalf("call %d: %+v", i, call)
				}
			}
			if tc.stream && (chunks != 9 || finished != 2) {
				t.Fatalf("%d chunks, %d finished tool calls", chunks, finished)
			}
			if !tc.stream {
				var raw struct {
					Choices []struct {
						Message map[string]json.RawMessage
					}
				}
				if err := json.Unmarshal([]byte(resp.RawJSON()), &raw); err != nil || string(raw.Choices[0].Message["content"]) != "null" {
					t.Fatalf("content is not null: %v %s", err, resp.RawJSON())
				}
			}
			if rec.ToolCalls != 2 || rec.ToolResults != 0 || rec.Outcome != "ok" || rec.CompletionTokens != 9 {
				t.Fatalf("record %+v", rec)
			}

			params.Messages = append(params.Messages, msg.ToParam(),
				openai.ToolMessage("sunny", msg.ToolCalls[0].ID), openai.ToolMessage("rainy", msg.ToolCalls[1].ID))
			resp, _, _ = chatTurn(t, c, params, tc.stream)
			rec = s.Requests()[1]
			if resp.Choices[0].FinishReason != "stop" || resp.Choices[0].Message.Content != tokenText(0, 9) ||
				len(resp.Choices[0].Message.ToolCalls) != 0 || rec.ToolCalls != 0 || rec.ToolResults != 2 {
				t.Fatalf("after the results: answer %+v, record %+v", resp, rec)
			}
		})
	}
}

// TestChatToolCallStream checks the chunks themselves: a role chunk
// (content null), per call a chunk with index, id, type, name and empty
// arguments and two argument pieces, the finish chunk, the usage chunk
// (usage null before it), [DONE].
func TestChatToolCallStream(t *testing.T) {
	s := start(t, Options{Keys: testKeys(), ToolCalls: true})
	body := chatBody("hi", true, true)
	body["tools"] = []map[string]any{{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": weatherSchema}}}
	resp, data, err := post(t, s, "/v1/chat/completions", keyA, body, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v %s", err, resp, data)
	}
	events := sseEvents(t, data)
	if events[len(events)-1] != "[DONE]" {
		t.Fatalf("last event %q", events[len(events)-1])
	}
	var got []string
	for i, ev := range events[:len(events)-1] {
		var c struct {
			Object  string
			Usage   json.RawMessage
			Choices []struct {
				Delta        map[string]json.RawMessage
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil || c.Object != "chat.completion.chunk" {
			t.Fatalf("chunk %d: %v %s", i, err, ev)
		}
		if len(c.Choices) == 0 {
			got = append(got, "usage "+string(c.Usage))
			continue
		}
		if string(c.Usage) != "null" {
			t.Fatalf("chunk %d usage %s", i, c.Usage)
		}
		d := c.Choices[0].Delta
		switch {
		case c.Choices[0].FinishReason != nil:
			got = append(got, fmt.Sprintf("finish %s %d", *c.Choices[0].FinishReason, len(d)))
		case d["role"] != nil:
			got = append(got, fmt.Sprintf("role %s content %s", d["role"], d["content"]))
		default:
			got = append(got, "tool_calls "+string(d["tool_calls"]))
		}
	}
	want := []string{
		`role "assistant" content null`,
		`tool_calls [{"index":0,"id":"call_1_0","type":"function","function":{"name":"get_weather","arguments":""}}]`,
		`tool_calls [{"index":0,"function":{"arguments":"{\"city\":"}}]`,
		`tool_calls [{"index":0,"function":{"arguments":"\"Paris\"}"}}]`,
		`tool_calls [{"index":1,"id":"call_1_1","type":"function","function":{"name":"get_weather","arguments":""}}]`,
		`tool_calls [{"index":1,"function":{"arguments":"{\"city\":"}}]`,
		`tool_calls [{"index":1,"function":{"arguments":"\"Rome\"}"}}]`,
		`finish tool_calls 0`,
		`usage {"prompt_tokens":1,"completion_tokens":16,"total_tokens":17}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("chunks\n got %s\nwant %s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r := s.Requests()[0]; r.Chunks != 9 || r.ToolCalls != 2 || r.Outcome != "ok" {
		t.Fatalf("record %+v", r)
	}
}

// anthropicTurn sends params as JSON or as a stream and returns the
// message (accumulated with Message.Accumulate for a stream) and the
// stream's event types.
func anthropicTurn(t *testing.T, c anthropic.Client, params anthropic.MessageNewParams, stream bool) (anthropic.Message, []string) {
	t.Helper()
	ctx := testCtx(t)
	if !stream {
		msg, err := c.Messages.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		return *msg, nil
	}
	s := c.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	var names []string
	for s.Next() {
		ev := s.Current()
		names = append(names, ev.Type)
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return acc, names
}

// TestAnthropicToolUse drives /v1/messages with tools through the
// official SDK, JSON and stream, tool calls on and off: with calls on, a
// text block and two tool_use blocks (stop_reason tool_use), then text
// once the tool results come back; off, text as before.
func TestAnthropicToolUse(t *testing.T) {
	tests := []struct {
		name      string
		toolCalls bool
		stream    bool
	}{
		{"json calls", true, false},
		{"stream calls", true, true},
		{"json off", false, false},
		{"stream off", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, Options{Auth: config.AuthXAPIKey, Keys: testKeys(), CompletionTokens: 9, TokensPerChunk: 3, ToolCalls: tc.toolCalls})
			c := anthropicClient(s, keyA)
			params := messageParams(64)
			params.Tools = []anthropic.ToolUnionParam{
				{OfTool: &anthropic.ToolParam{Name: "get_weather", InputSchema: anthropic.ToolInputSchemaParam{Properties: weatherSchema["properties"]}}},
				{OfTool: &anthropic.ToolParam{Name: "get_time", InputSchema: anthropic.ToolInputSchemaParam{Properties: weatherSchema["properties"]}}},
			}

			msg, names := anthropicTurn(t, c, params, tc.stream)
			rec := s.Requests()[0]
			if msg.Usage.InputTokens != 4 || msg.Usage.OutputTokens != 9 {
				t.Fatalf("usage %+v", msg.Usage)
			}
			if !tc.toolCalls {
				if msg.StopReason != anthropic.StopReasonEndTurn || len(msg.Content) != 1 || msg.Content[0].Text != tokenText(0, 9) || rec.ToolCalls != 0 {
					t.Fatalf("message %+v, record %+v", msg, rec)
				}
				return
			}

			_, n, _ := strings.Cut(strings.TrimPrefix(msg.ID, "msg_mock_"), "_")
			if msg.StopReason != anthropic.StopReasonToolUse || len(msg.Content) != 3 || msg.Content[0].Type != "text" || msg.Content[0].Text != ToolCallText {
				t.Fatalf("message %+v", msg)
			}
			for i, b := range msg.Content[1:] {
				if b.Type != "tool_use" || b.ID != fmt.Sprintf("toolu_%s_%d", n, i) || b.Name != "get_weather" || string(b.Input) != ToolCallArguments()[i] {
					t.Fatalf("block %d: %+v (input %s)", i+1, b, b.Input)
				}
			}
			if tc.stream {
				// The SDK drops the ping.
				want := "message_start content_block_start content_block_delta content_block_stop" +
					strings.Repeat(" content_block_start content_block_delta content_block_delta content_block_stop", 2) +
					" message_delta message_stop"
				if got := strings.Join(names, " "); got != want {
					t.Fatalf("events\n got %s\nwant %s", got, want)
				}
			}
			if rec.ToolCalls != 2 || rec.ToolResults != 0 || rec.Outcome != "ok" || rec.CompletionTokens != 9 {
				t.Fatalf("record %+v", rec)
			}

			params.Messages = append(params.Messages, msg.ToParam(), anthropic.NewUserMessage(
				anthropic.NewToolResultBlock(msg.Content[1].ID, "sunny", false),
				anthropic.NewToolResultBlock(msg.Content[2].ID, "rainy", false)))
			msg, _ = anthropicTurn(t, c, params, tc.stream)
			rec = s.Requests()[1]
			if msg.StopReason != anthropic.StopReasonEndTurn || len(msg.Content) != 1 || msg.Content[0].Text != tokenText(0, 9) ||
				rec.ToolCalls != 0 || rec.ToolResults != 2 {
				t.Fatalf("after the results: message %+v, record %+v", msg, rec)
			}
		})
	}
}

// TestConversationRecord: what the record says of tool results and images,
// and when a request is answered with tool calls, for bodies the SDKs do
// not build in the tests above.
func TestConversationRecord(t *testing.T) {
	s := start(t, Options{Keys: testKeys(), ToolCalls: true})
	chatTool := []map[string]any{{"type": "function", "function": map[string]any{"name": "get_weather"}}}
	claudeTool := []map[string]any{{"name": "get_weather", "input_schema": weatherSchema}}
	image := map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
	type msgs = []map[string]any
	tests := []struct {
		name      string
		path      string
		tools     any
		messages  msgs
		toolCalls int
		results   int
		image     bool
	}{
		{"chat image", "/v1/chat/completions", nil, msgs{{"role": "user", "content": []map[string]any{
			{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,iVBORw0KGgo="}}}}},
			0, 0, true},
		{"chat text", "/v1/chat/completions", nil, msgs{{"role": "user", "content": "hi"}}, 0, 0, false},
		{"chat tool result then a user turn", "/v1/chat/completions", chatTool, msgs{
			{"role": "user", "content": "hi"},
			{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{"id": "c", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": "{}"}}}},
			{"role": "tool", "tool_call_id": "c", "content": "sunny"},
			{"role": "user", "content": "and tomorrow?"}}, 2, 1, false},
		{"chat tool result last", "/v1/chat/completions", chatTool, msgs{
			{"role": "user", "content": "hi"},
			{"role": "tool", "tool_call_id": "c", "content": []map[string]any{{"type": "text", "text": "sunny"}}}}, 0, 1, false},
		{"chat tool without a function name", "/v1/chat/completions", []map[string]any{{"type": "custom", "custom": map[string]any{"name": "x"}}},
			msgs{{"role": "user", "content": "hi"}}, 0, 0, false},
		{"anthropic image", "/v1/messages", nil, msgs{{"role": "user", "content": []any{image}}}, 0, 0, true},
		{"anthropic image in a tool result", "/v1/messages", claudeTool, msgs{
			{"role": "user", "content": "hi"},
			{"role": "assistant", "content": []map[string]any{{"type": "tool_use", "id": "t", "name": "get_weather", "input": map[string]any{}}}},
			{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": "t", "content": []any{image}}}}}, 0, 1, true},
		{"anthropic tool result then a user turn", "/v1/messages", claudeTool, msgs{
			{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": "t", "content": "sunny"}}},
			{"role": "assistant", "content": "ok"},
			{"role": "user", "content": "and Rome?"}}, 2, 1, false},
		{"anthropic chat-shaped tool is not a tool", "/v1/messages", chatTool, msgs{{"role": "user", "content": "hi"}}, 0, 0, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"model": "m", "max_tokens": 16, "messages": tc.messages}
			if tc.tools != nil {
				body["tools"] = tc.tools
			}
			resp, data, err := post(t, s, tc.path, keyA, body, map[string]string{"anthropic-version": "2023-06-01"})
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%v %v %s", err, resp, data)
			}
			r := s.Requests()[i]
			if r.ToolCalls != tc.toolCalls || r.ToolResults != tc.results || r.SawImage != tc.image {
				t.Fatalf("record calls %d results %d image %v; body %s", r.ToolCalls, r.ToolResults, r.SawImage, data)
			}
			if called := strings.Contains(string(data), `"tool_calls"`) || strings.Contains(string(data), `"tool_use"`); called != (tc.toolCalls > 0) {
				t.Fatalf("answer %s", data)
			}
		})
	}
}
