package messageschat

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/swarmgate/swarmgate/extproc/translate"
)

// sdkBackend serves, as a Messages API, a golden case's recorded
// chat answer translated back: the request the SDK sends is translated
// too (and must be), so both halves meet the SDK.
func sdkBackend(t *testing.T, caseName string, status int) *anthropic.Client {
	t.Helper()
	tr := New()
	dir := filepath.Join("testdata", "anthropic_messages_to_chat_completions", caseName)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		out, err := tr.Request(body, translate.RequestOptions{Model: "upstream-model"})
		if err != nil {
			t.Errorf("request: %v\n%s", err, body)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		var chat struct {
			Stream        bool `json:"stream"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.Unmarshal(out, &chat); err != nil {
			t.Errorf("translated request: %v", err)
		}
		kind := "json"
		if chat.Stream {
			kind = "sse"
			if !chat.StreamOptions.IncludeUsage {
				t.Error("a streamed request must ask for the usage chunk")
			}
		}
		in, err := os.ReadFile(filepath.Join(dir, "response.in."+kind))
		if err != nil {
			t.Errorf("case %s: %v", caseName, err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp := tr.NewResponse(translate.ResponseOptions{Status: status, Stream: kind == "sse", RequestID: "sg-sdk"})
		if kind == "sse" {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		var buf []byte
		for i := 0; i < len(in); i += 13 {
			j := min(i+13, len(in))
			if buf, err = resp.Write(buf[:0], in[i:j], j == len(in)); err != nil {
				t.Errorf("response: %v", err)
				return
			}
			_, _ = w.Write(buf)
		}
	}))
	t.Cleanup(srv.Close)
	c := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	return &c
}

func sdkParams() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 1024,
		System:    []anthropic.TextBlockParam{{Text: "Be brief."}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris and time in Tokyo?"))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
			Name:        "get_weather",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"location": map[string]any{"type": "string"}}},
		}}},
	}
}

func sdkContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestMessagesChatSDKJSON(t *testing.T) {
	c := sdkBackend(t, "tool_use_multi_turn", 200)
	msg, err := c.Messages.New(sdkContext(t), sdkParams())
	if err != nil {
		t.Fatal(err)
	}
	if msg.ID != "msg_CZ1cB2cD3eF4gH5iJ6kL7mN8oP9s" || msg.StopReason != anthropic.StopReasonToolUse || len(msg.Content) != 2 {
		t.Fatalf("got id %q stop %q content %d", msg.ID, msg.StopReason, len(msg.Content))
	}
	var in struct{ Location, Unit string }
	b := msg.Content[1]
	if b.Type != "tool_use" || b.ID != "call_Rn4yZi9cW2" || b.Name != "get_weather" || json.Unmarshal(b.Input, &in) != nil || in.Location != "Tokyo, Japan" {
		t.Fatalf("tool_use block: %+v %s", b, b.Input)
	}
	if u := msg.Usage; u.InputTokens != 412 || u.OutputTokens != 58 || u.CacheReadInputTokens != 0 {
		t.Fatalf("usage %+v", u)
	}

	c = sdkBackend(t, "cached_tokens", 200)
	if msg, err = c.Messages.New(sdkContext(t), sdkParams()); err != nil {
		t.Fatal(err)
	}
	if msg.Content[0].Text != "The contract says the lease ends in March." || msg.StopReason != anthropic.StopReasonEndTurn {
		t.Fatalf("got %+v", msg)
	}
	if u := msg.Usage; u.InputTokens != 102 || u.CacheReadInputTokens != 2304 || u.OutputTokens != 11 {
		t.Fatalf("usage %+v", u)
	}
}

func TestMessagesChatSDKError(t *testing.T) {
	c := sdkBackend(t, "upstream_429", 429)
	_, err := c.Messages.New(sdkContext(t), sdkParams())
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
		t.Fatalf("got %v, want a 429 *anthropic.Error", err)
	}
	if typ := apiErr.Type(); typ != "rate_limit_error" {
		t.Fatalf("error type %q", typ)
	}
}

func TestMessagesChatSDKStream(t *testing.T) {
	c := sdkBackend(t, "stream_tool_calls", 200)
	p := sdkParams()
	stream := c.Messages.NewStreaming(sdkContext(t), p)
	var msg anthropic.Message
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 3 || msg.Content[0].Text != "Checking both." || msg.StopReason != anthropic.StopReasonToolUse {
		t.Fatalf("got %d blocks, stop %q: %+v", len(msg.Content), msg.StopReason, msg.Content)
	}
	var weather struct{ Location string }
	var clock struct{ Timezone string }
	if err := json.Unmarshal(msg.Content[1].Input, &weather); err != nil || weather.Location != "Paris, France" || msg.Content[1].ID != "call_Pa1sW3ath" {
		t.Fatalf("first call %s: %v", msg.Content[1].Input, err)
	}
	if err := json.Unmarshal(msg.Content[2].Input, &clock); err != nil || clock.Timezone != "Asia/Tokyo" || msg.Content[2].Name != "get_time" {
		t.Fatalf("second call %s: %v", msg.Content[2].Input, err)
	}
	if u := msg.Usage; u.InputTokens != 49 || u.CacheReadInputTokens != 256 || u.OutputTokens != 41 {
		t.Fatalf("usage %+v", u)
	}

	c = sdkBackend(t, "stream_text", 200)
	stream = c.Messages.NewStreaming(sdkContext(t), p)
	msg = anthropic.Message{}
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	const haiku = "Soft \"rain\" on the roof\npuddles hold the grey sky—\nfrogs begin to sing"
	if len(msg.Content) != 1 || msg.Content[0].Text != haiku || msg.StopReason != anthropic.StopReasonEndTurn || msg.Usage.OutputTokens != 19 || msg.Usage.InputTokens != 17 {
		t.Fatalf("got %+v", msg)
	}
}

func TestMessagesChatSDKStreamError(t *testing.T) {
	for _, name := range []string{"stream_error", "stream_truncated"} {
		t.Run(name, func(t *testing.T) {
			c := sdkBackend(t, name, 200)
			stream := c.Messages.NewStreaming(sdkContext(t), sdkParams())
			var msg anthropic.Message
			for stream.Next() {
				if err := msg.Accumulate(stream.Current()); err != nil {
					t.Fatal(err)
				}
			}
			var apiErr *anthropic.Error
			if err := stream.Err(); !errors.As(err, &apiErr) || apiErr.Type() != "api_error" {
				t.Fatalf("got %v, want the stream's api_error", err)
			}
			if len(msg.Content) != 1 || msg.Content[0].Text == "" {
				t.Fatalf("the text before the error: %+v", msg.Content)
			}
		})
	}
}
