package e2e

import (
	"encoding/json"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// A 1×1 PNG: images must survive translation as images.
const pixelPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

var weatherSchema = map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}

// sameJSON compares two JSON texts by value.
func sameJSON(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && jsonEqual(x, y)
}

func jsonEqual(x, y any) bool {
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

// lastRecord is the backend's latest request record.
func latestRecord(t *testing.T, s *mockupstream.Server) mockupstream.Record {
	t.Helper()
	recs := s.Requests()
	if len(recs) == 0 {
		t.Fatal("the backend got no request")
	}
	return recs[len(recs)-1]
}

// TestTranslatedToolUseMessagesToChat: Claude-Code-style tool use through
// a chat relay: an image and a tool in, two parallel tool_use blocks out
// (JSON and stream), their results back in the next turn, text out.
func TestTranslatedToolUseMessagesToChat(t *testing.T) {
	g := startTranslation(t)
	ctx := testCtx(t)
	c := g.anthropic(keyTeam)
	p := anthropic.MessageNewParams{Model: "claude-cheap", MaxTokens: 256,
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather", Description: anthropic.String("Weather by city"),
			InputSchema: anthropic.ToolInputSchemaParam{Properties: weatherSchema["properties"], Required: []string{"city"}}}}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in the cities on this map?"),
			anthropic.NewImageBlockBase64("image/png", pixelPNG))}}
	check := func(what string, m anthropic.Message) []anthropic.ContentBlockParamUnion {
		t.Helper()
		var results []anthropic.ContentBlockParamUnion
		args := mockupstream.ToolCallArguments()
		for _, b := range m.Content {
			if b.Type != "tool_use" {
				continue
			}
			if b.Name != "get_weather" || b.ID == "" || len(results) >= len(args) || !sameJSON(string(b.Input), args[len(results)]) {
				t.Errorf("%s: tool_use %+v", what, b)
			}
			results = append(results, anthropic.NewToolResultBlock(b.ID, "18C and sunny", false))
		}
		if len(results) != 2 || m.StopReason != anthropic.StopReasonToolUse {
			t.Fatalf("%s: %d tool_use blocks, stop %q: %+v", what, len(results), m.StopReason, m)
		}
		if rec := latestRecord(t, g.relay); rec.ToolCalls != 2 || !rec.SawImage {
			t.Errorf("%s: relay record %+v", what, rec)
		}
		return results
	}
	msg, err := c.Messages.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	results := check("json", *msg)
	s := c.Messages.NewStreaming(ctx, p)
	var acc anthropic.Message
	for s.Next() {
		if err := acc.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	check("stream", acc)

	p.Messages = append(p.Messages, msg.ToParam(), anthropic.NewUserMessage(results...))
	final, err := c.Messages.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if final.StopReason != anthropic.StopReasonEndTurn || final.Content[0].Text == "" {
		t.Fatalf("after the tool results: %+v", final)
	}
	if rec := latestRecord(t, g.relay); rec.ToolResults != 2 || rec.ToolCalls != 0 {
		t.Errorf("relay record after the tool results %+v", rec)
	}
}

// TestTranslatedToolUseChatToMessages: an OpenAI agent's function calling
// on an Anthropic provider, image included, JSON and stream.
func TestTranslatedToolUseChatToMessages(t *testing.T) {
	g := startTranslation(t)
	ctx := testCtx(t)
	c := g.client(keyTeam)
	p := openai.ChatCompletionNewParams{Model: "gpt-on-claude", MaxTokens: openai.Int(256),
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "get_weather", Description: openai.String("Weather by city"), Parameters: shared.FunctionParameters(weatherSchema)})},
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
			openai.TextContentPart("Weather in the cities on this map?"),
			openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64," + pixelPNG})})}}
	check := func(what string, m openai.ChatCompletionMessage, finish string) []openai.ChatCompletionMessageParamUnion {
		t.Helper()
		args := mockupstream.ToolCallArguments()
		var results []openai.ChatCompletionMessageParamUnion
		for i, tc := range m.ToolCalls {
			if tc.Function.Name != "get_weather" || tc.ID == "" || i >= len(args) || !sameJSON(tc.Function.Arguments, args[i]) {
				t.Errorf("%s: tool call %+v", what, tc)
			}
			results = append(results, openai.ToolMessage("18C and sunny", tc.ID))
		}
		if len(results) != 2 || finish != "tool_calls" {
			t.Fatalf("%s: %d tool calls, finish %q: %+v", what, len(results), finish, m)
		}
		if rec := latestRecord(t, g.ant); rec.ToolCalls != 2 || !rec.SawImage {
			t.Errorf("%s: provider record %+v", what, rec)
		}
		return results
	}
	resp, err := c.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	results := check("json", resp.Choices[0].Message, resp.Choices[0].FinishReason)
	s := c.Chat.Completions.NewStreaming(ctx, p)
	acc := openai.ChatCompletionAccumulator{}
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil || len(acc.Choices) != 1 {
		t.Fatalf("stream: %v %+v", err, acc.ChatCompletion)
	}
	check("stream", acc.Choices[0].Message, acc.Choices[0].FinishReason)

	p.Messages = append(append(p.Messages, resp.Choices[0].Message.ToParam()), results...)
	final, err := c.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if final.Choices[0].FinishReason != "stop" || final.Choices[0].Message.Content == "" {
		t.Fatalf("after the tool results: %+v", final)
	}
	if rec := latestRecord(t, g.ant); rec.ToolResults != 2 || rec.ToolCalls != 0 {
		t.Errorf("provider record after the tool results %+v", rec)
	}
}

// TestTranslatedToolUseResponsesToChat: an Agents-SDK-style function call
// loop over the Responses API on a chat relay, JSON and stream.
func TestTranslatedToolUseResponsesToChat(t *testing.T) {
	g := startTranslation(t)
	ctx := testCtx(t)
	c := g.client(keyTeam)
	input := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("Weather in Paris and Rome?", responses.EasyInputMessageRoleUser)}
	p := responses.ResponseNewParams{Model: "claude-cheap", Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", weatherSchema, false)},
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input}}
	calls := func(what string, r responses.Response) []responses.ResponseOutputItemUnion {
		t.Helper()
		args := mockupstream.ToolCallArguments()
		var out []responses.ResponseOutputItemUnion
		for _, it := range r.Output {
			if it.Type != "function_call" {
				continue
			}
			if it.Name != "get_weather" || it.CallID == "" || len(out) >= len(args) || !sameJSON(it.Arguments.OfString, args[len(out)]) {
				t.Errorf("%s: function_call %+v", what, it)
			}
			out = append(out, it)
		}
		if len(out) != 2 {
			t.Fatalf("%s: %d function calls: %+v", what, len(out), r.Output)
		}
		return out
	}
	resp, err := c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	fc := calls("json", *resp)
	s := c.Responses.NewStreaming(ctx, p)
	var done responses.Response
	for s.Next() {
		if ev := s.Current(); ev.Type == "response.completed" {
			done = ev.Response
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	calls("stream", done)

	for _, it := range fc {
		input = append(input, responses.ResponseInputItemParamOfFunctionCall(it.Arguments.OfString, it.CallID, it.Name))
		out := responses.ResponseInputItemParamOfFunctionCallOutput("18C and sunny")
		out.OfFunctionCallOutput.CallID = openai.String(it.CallID)
		input = append(input, out)
	}
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
	final, err := c.Responses.New(ctx, p, option.WithHeader("x-request-id", "r2c-tools-final"))
	if err != nil {
		t.Fatal(err)
	}
	if final.OutputText() == "" {
		t.Fatalf("after the tool results: %+v", final)
	}
	if rec := latestRecord(t, g.relay); rec.ToolResults != 2 || rec.ToolCalls != 0 {
		t.Errorf("relay record after the tool results %+v", rec)
	}
}
