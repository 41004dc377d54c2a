package mockupstream

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/swarmgate/swarmgate/internal/config"
)

// anthropicClient sends the key as x-api-key, as Claude Code does (the
// SDK's WithAPIKey sends it as a bearer token).
func anthropicClient(s *Server, key string) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(s.URL()), aoption.WithHeader("x-api-key", key), aoption.WithMaxRetries(0))
}

func messageParams(maxTokens int64) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: maxTokens,
		System:   []anthropic.TextBlockParam{{Text: "four"}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("twelve bytes"))}}
}

// TestAnthropicClient drives /v1/messages and count_tokens with the
// official SDK, JSON and stream: x-api-key auth, the usage split into
// uncached input, cache reads and cache writes, message_start plus the
// cumulative message_delta.
func TestAnthropicClient(t *testing.T) {
	s := start(t, Options{Auth: config.AuthXAPIKey, Keys: testKeys(), CompletionTokens: 9, TokensPerChunk: 2,
		CachedTokens: 1, CacheWriteTokens: 2, ReasoningTokens: 3})
	client := anthropicClient(s, keyA)
	ctx := testCtx(t)

	msg, err := client.Messages.New(ctx, messageParams(64))
	if err != nil {
		t.Fatal(err)
	}
	// prompt: 12 + 4 bytes = 4 tokens: 1 read from the cache, 2 written, 1 plain.
	u := msg.Usage
	if u.InputTokens != 1 || u.CacheReadInputTokens != 1 || u.CacheCreationInputTokens != 2 || u.OutputTokens != 9 ||
		msg.StopReason != anthropic.StopReasonEndTurn || len(msg.Content) != 1 || msg.Content[0].Text != tokenText(0, 9) {
		t.Fatalf("message %+v", msg)
	}

	stream := client.Messages.NewStreaming(ctx, messageParams(64))
	var acc anthropic.Message
	var names []string
	for stream.Next() {
		ev := stream.Current()
		names = append(names, ev.Type)
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	// The SDK drops the ping the mock sends after content_block_start.
	want := "message_start content_block_start content_block_delta content_block_delta content_block_delta " +
		"content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	if acc.Usage.OutputTokens != 9 || acc.Usage.CacheCreationInputTokens != 2 || acc.Content[0].Text != tokenText(0, 9) ||
		acc.StopReason != anthropic.StopReasonEndTurn {
		t.Fatalf("accumulated %+v", acc)
	}

	cut, err := client.Messages.New(ctx, messageParams(4))
	if err != nil || cut.StopReason != anthropic.StopReasonMaxTokens || cut.Usage.OutputTokens != 4 {
		t.Fatalf("max_tokens 4: %v %+v", err, cut)
	}

	n, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "claude-sonnet-4-5",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("twelve bytes"))}})
	if err != nil || n.InputTokens != 3 {
		t.Fatalf("count_tokens: %v %+v", err, n)
	}
	recs := s.Requests()
	if r := recs[len(recs)-1]; r.Endpoint != "count_tokens" || r.CompletionTokens != 0 {
		t.Fatalf("count_tokens record %+v", r)
	}
	if r := recs[0]; r.Endpoint != "messages" || r.PromptTokens != 4 || r.CachedTokens != 1 || r.CacheWriteTokens != 2 || r.ReasoningTokens != 0 {
		t.Fatalf("messages record %+v", r)
	}
}

// TestAnthropicErrors: refusals and behaviours in Anthropic's shape, which
// the SDK parses as its error type.
func TestAnthropicErrors(t *testing.T) {
	s := start(t, Options{Auth: config.AuthXAPIKey, Keys: testKeys()})
	ctx := testCtx(t)
	tests := []struct {
		name     string
		key      string
		behavior *Behavior
		status   int
		typ      string
	}{
		{"unknown key", "sk-wrong", nil, 401, "authentication_error"},
		{"rate limited", keyA, &Behavior{Action: ActRateLimit, RetryAfter: 3 * time.Second}, 429, "rate_limit_error"},
		{"overloaded", keyA, &Behavior{Action: ActError, Status: 529}, 529, "overloaded_error"},
		{"server error", keyA, &Behavior{Action: ActError}, 500, "api_error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.behavior != nil {
				s.SetBehavior("a", *tc.behavior)
				defer s.ClearBehaviors()
			}
			c := anthropicClient(s, tc.key)
			_, err := c.Messages.New(ctx, messageParams(16))
			var apiErr *anthropic.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("error %v is not an *anthropic.Error", err)
			}
			if apiErr.StatusCode != tc.status || string(apiErr.Type()) != tc.typ || apiErr.Message == "" {
				t.Fatalf("got %d %q %q", apiErr.StatusCode, apiErr.Type(), apiErr.Message)
			}
			if tc.status == 429 && (apiErr.Response.Header.Get("Retry-After") != "3" ||
				apiErr.Response.Header.Get("Anthropic-Ratelimit-Requests-Remaining") != "0" ||
				apiErr.Response.Header.Get("X-Ratelimit-Remaining-Requests") != "") {
				t.Fatalf("429 headers %v", apiErr.Response.Header)
			}
		})
	}
}

// TestAnthropicRequiresVersion: the provider refuses a request without
// anthropic-version or (on /v1/messages) max_tokens, so a gateway that
// drops either is caught.
func TestAnthropicRequiresVersion(t *testing.T) {
	s := start(t, Options{Auth: config.AuthXAPIKey, Keys: testKeys()})
	body := map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": []map[string]any{{"role": "user", "content": "hi"}}}
	resp, data, err := post(t, s, "/v1/messages", "", body, map[string]string{"x-api-key": keyA})
	if err != nil || resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), `"type":"error"`) ||
		!strings.Contains(string(data), "anthropic-version") {
		t.Fatalf("no version: %v %d %s", err, resp.StatusCode, data)
	}
	delete(body, "max_tokens")
	resp, data, _ = post(t, s, "/v1/messages", "", body, map[string]string{"x-api-key": keyA, "anthropic-version": "2023-06-01"})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), "max_tokens") {
		t.Fatalf("no max_tokens: %d %s", resp.StatusCode, data)
	}
}

// TestAnthropicRateLimitHeaders: RPM/TPM windows report Anthropic's
// headers (RFC 3339 resets) on Anthropic endpoints, OpenAI's elsewhere.
func TestAnthropicRateLimitHeaders(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := start(t, Options{Auth: config.AuthXAPIKey, Keys: testKeys(), Now: func() time.Time { return now }})
	s.SetBehavior("a", Behavior{RPM: 1, TPM: 1000})
	hdr := map[string]string{"x-api-key": keyA, "anthropic-version": "2023-06-01"}
	body := map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": []map[string]any{{"role": "user", "content": "hi"}}}
	resp, _, _ := post(t, s, "/v1/messages", "", body, hdr)
	h := resp.Header
	if resp.StatusCode != 200 || h.Get("Anthropic-Ratelimit-Requests-Remaining") != "0" || h.Get("Anthropic-Ratelimit-Requests-Limit") != "1" ||
		h.Get("Anthropic-Ratelimit-Tokens-Reset") != "2026-01-02T03:05:05Z" || h.Get("X-Ratelimit-Limit-Requests") != "" {
		t.Fatalf("%d %v", resp.StatusCode, h)
	}
	if resp, _, _ = post(t, s, "/v1/messages", "", body, hdr); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "60" {
		t.Fatalf("beyond RPM: %d %v", resp.StatusCode, resp.Header)
	}
}
