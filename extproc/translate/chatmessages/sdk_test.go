package chatmessages

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/extproc/translate/internal/translatetest"
)

// sdkServe answers every request with the translation of a golden
// case's recorded Anthropic answer, written in 7-byte chunks the way the
// router-level filter would pass them on.
func sdkServe(t *testing.T, name, file string, o translate.ResponseOptions) *openai.Client {
	t.Helper()
	in, err := readChatMessagesCase(name, file)
	if err != nil {
		t.Fatal(err)
	}
	out := translatetest.TranslateChunked(t, New(), o, in, 7)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.Stream && o.Status < 400 {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(o.Status)
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	c := openai.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	return &c
}

func sdkParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	}
}

func sdkContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestChatMessagesSDKJSON(t *testing.T) {
	ctx := sdkContext(t)
	c := sdkServe(t, "tool_use_multi_turn", "response.in.json", translate.ResponseOptions{Status: 200, Created: 1764806400})
	got, err := c.Chat.Completions.New(ctx, sdkParams())
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "chatcmpl-msg_01Aq9w938a90dw8q" || got.Created != 1764806400 || got.Model != "claude-sonnet-4-5-20250929" {
		t.Fatalf("id/created/model: %q %d %q", got.ID, got.Created, got.Model)
	}
	m := got.Choices[0].Message
	if !strings.HasPrefix(m.Content, "It is 14°C") || got.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("content %q, finish %q", m.Content, got.Choices[0].FinishReason)
	}
	if len(m.ToolCalls) != 2 || m.ToolCalls[0].Function.Name != "get_weather" ||
		m.ToolCalls[0].Function.Arguments != `{"city":"Paris","unit":"celsius"}` || m.ToolCalls[1].Function.Arguments != `{"city":"Tokyo"}` {
		t.Fatalf("tool calls %+v", m.ToolCalls)
	}
	if got.Usage.PromptTokens != 512 || got.Usage.CompletionTokens != 96 || got.Usage.TotalTokens != 608 {
		t.Fatalf("usage %+v", got.Usage)
	}

	c = sdkServe(t, "cache_usage", "response.in.json", translate.ResponseOptions{Status: 200, Created: 1})
	if got, err = c.Chat.Completions.New(ctx, sdkParams()); err != nil {
		t.Fatal(err)
	}
	if u := got.Usage; u.PromptTokens != 2308 || u.PromptTokensDetails.CachedTokens != 2048 || u.TotalTokens != 2350 {
		t.Fatalf("cache usage %+v", u)
	}
	if got.Choices[0].FinishReason != "stop" {
		t.Fatalf("finish %q", got.Choices[0].FinishReason)
	}
}

func TestChatMessagesSDKError(t *testing.T) {
	c := sdkServe(t, "upstream_529", "response.in.json", translate.ResponseOptions{Status: 529})
	_, err := c.Chat.Completions.New(sdkContext(t), sdkParams())
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err %v, want an *openai.Error", err)
	}
	if apiErr.StatusCode != 529 || apiErr.Type != "overloaded_error" || apiErr.Message != "Overloaded" {
		t.Fatalf("error %d %q %q", apiErr.StatusCode, apiErr.Type, apiErr.Message)
	}
}

func sdkAccumulate(t *testing.T, c *openai.Client) (openai.ChatCompletionAccumulator, int, error) {
	t.Helper()
	params := sdkParams()
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.Chat.Completions.NewStreaming(sdkContext(t), params)
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		chunks++
		if !acc.AddChunk(stream.Current()) {
			t.Fatalf("the accumulator refused chunk %d: %s", chunks, stream.Current().RawJSON())
		}
	}
	return acc, chunks, stream.Err()
}

func TestChatMessagesSDKStream(t *testing.T) {
	c := sdkServe(t, "stream_tool_use", "response.in.sse", translate.ResponseOptions{Status: 200, Stream: true, IncludeUsage: true, Created: 1764806400})
	acc, _, err := sdkAccumulate(t, c)
	if err != nil {
		t.Fatal(err)
	}
	ch := acc.Choices[0]
	if ch.Message.Content != "I'll check both cities." || ch.FinishReason != "tool_calls" {
		t.Fatalf("content %q finish %q", ch.Message.Content, ch.FinishReason)
	}
	tc := ch.Message.ToolCalls
	if len(tc) != 2 || tc[0].ID != "toolu_01T1x1fJ34qAmk2tNTrN7Up6" || tc[0].Function.Arguments != `{"city": "Paris", "unit": "celsius"}` ||
		tc[1].Function.Name != "get_weather" || tc[1].Function.Arguments != `{"city": "Tokyo"}` {
		t.Fatalf("tool calls %+v", tc)
	}
	if acc.Usage.PromptTokens != 472 || acc.Usage.CompletionTokens != 89 || acc.Usage.TotalTokens != 561 {
		t.Fatalf("usage %+v", acc.Usage)
	}
	if acc.ID != "chatcmpl-msg_014p7gG3wDgGV9EUtLvnow3U" || acc.Model != "claude-sonnet-4-5-20250929" {
		t.Fatalf("id %q model %q", acc.ID, acc.Model)
	}

	c = sdkServe(t, "cache_usage", "response.in.sse", translate.ResponseOptions{Status: 200, Stream: true, IncludeUsage: true, Created: 1})
	if acc, _, err = sdkAccumulate(t, c); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != "Per section 4.2, the notice period is 30 days." ||
		acc.Usage.PromptTokens != 2308 || acc.Usage.PromptTokensDetails.CachedTokens != 2048 || acc.Usage.CompletionTokens != 42 {
		t.Fatalf("content %q usage %+v", acc.Choices[0].Message.Content, acc.Usage)
	}

	c = sdkServe(t, "stream_text_no_usage", "response.in.sse", translate.ResponseOptions{Status: 200, Stream: true, Created: 1})
	if acc, _, err = sdkAccumulate(t, c); err != nil {
		t.Fatal(err)
	}
	if want := "Hello! \"Quoted\" text,\nnew line & <tags> — ünïcödé 😀 Bye."; acc.Choices[0].Message.Content != want || acc.Choices[0].FinishReason != "stop" {
		t.Fatalf("content %q finish %q", acc.Choices[0].Message.Content, acc.Choices[0].FinishReason)
	}
	if acc.Usage.TotalTokens != 0 {
		t.Fatalf("usage sent without include_usage: %+v", acc.Usage)
	}
}

func TestChatMessagesSDKStreamError(t *testing.T) {
	c := sdkServe(t, "stream_overloaded_error", "response.in.sse", translate.ResponseOptions{Status: 200, Stream: true, IncludeUsage: true, Created: 1})
	acc, chunks, err := sdkAccumulate(t, c)
	if err == nil || !strings.Contains(err.Error(), "Overloaded") {
		t.Fatalf("err %v, want the backend's overloaded error", err)
	}
	if chunks != 2 || acc.Choices[0].Message.Content != "Once upon" {
		t.Fatalf("%d chunks, content %q before the error", chunks, acc.Choices[0].Message.Content)
	}
}
