package e2e

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

func responseParams(model string) responses.ResponseNewParams {
	return responses.ResponseNewParams{Model: model, Instructions: openai.String("Be brief."),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello to the gateway.")}}
}

func messageParams(model string, maxTokens int64) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: model, MaxTokens: maxTokens,
		System:   []anthropic.TextBlockParam{{Text: "Be brief."}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello to the gateway."))}}
}

// noAnthropicHeaders: an OpenAI-style backend never gets anthropic-*.
func noAnthropicHeaders(t *testing.T, h http.Header) {
	t.Helper()
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "anthropic-") {
			t.Errorf("an OpenAI-style backend got %s", k)
		}
	}
}

// TestResponsesPassthrough: /v1/responses through openai-go, JSON and
// stream, on an alias whose targets speak both families: routed to the
// family's cluster, the OpenAI backend's own key, no client or anthropic-*
// header upstream, and a ledger equal to the usage the provider reported
// (cached input and reasoning priced apart).
func TestResponsesPassthrough(t *testing.T) {
	g := startFamilies(t)
	ctx := testCtx(t)
	c := g.client(keyTeam, option.WithHeader("anthropic-version", "2023-06-01"), option.WithHeader("anthropic-beta", "x"))

	resp, err := c.Responses.New(ctx, responseParams("mixed"), option.WithHeader("x-request-id", "resp-json"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.OutputTokens != 7 || resp.Usage.OutputTokensDetails.ReasoningTokens != 3 || resp.Usage.InputTokensDetails.CachedTokens != 2 ||
		resp.OutputText() == "" {
		t.Fatalf("response %+v", resp)
	}
	stream := c.Responses.NewStreaming(ctx, responseParams("mixed"), option.WithHeader("x-request-id", "resp-sse"))
	var text strings.Builder
	completed := 0
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			completed++
		}
	}
	if err := stream.Err(); err != nil || completed != 1 || text.String() != resp.OutputText() {
		t.Fatalf("stream: %v, %d completed, text %q", err, completed, text.String())
	}

	for _, id := range []string{"resp-json", "resp-sse"} {
		rec, ok := waitRecord(t, g.sim, id)
		if !ok || rec.Cluster != (contract.Pool{Alias: "mixed", Family: config.FamilyResponses}).Cluster() || len(rec.Attempts) != 1 {
			t.Fatalf("%s: sim record %+v", id, rec)
		}
		h := rec.Attempts[0].Header
		if a := h.Get("authorization"); a != "Bearer oai-secret-1" && a != "Bearer oai-secret-2" {
			t.Errorf("%s: upstream authorization %q", id, a)
		}
		if h.Get("x-api-key") != "" {
			t.Errorf("%s: x-api-key reached the OpenAI backend", id)
		}
		noAnthropicHeaders(t, h)
		if rec.Attempts[0].Path != "/v1/responses" {
			t.Errorf("%s: upstream path %q", id, rec.Attempts[0].Path)
		}
	}
	if n := len(g.ant.Requests()); n != 0 {
		t.Errorf("the Anthropic backend got %d Responses requests", n)
	}
	want, cost := billed(priceOAI, served(g.oai)...)
	waitFor(t, "ledger equal to the provider's usage", func() bool {
		r, err := g.ledger.Query(ctx, "team", month())
		return err == nil && r.Total.Requests == 2 && r.Total.Streamed == 1 && r.Total.InputTokens == want.PromptTokens &&
			r.Total.OutputTokens == want.CompletionTokens && r.Total.CachedTokens == want.CachedTokens &&
			r.Total.ReasoningTokens == want.ReasoningTokens && r.Total.Cost == cost
	})
}

// TestMessagesPassthrough: /v1/messages through anthropic-sdk-go, JSON and
// stream: routed to the Anthropic backend of the mixed alias, which gets
// its own x-api-key, the client's anthropic-version and -beta and no
// bearer; the ledger equals the provider's usage with cache reads and
// cache writes priced apart.
func TestMessagesPassthrough(t *testing.T) {
	g := startFamilies(t)
	ctx := testCtx(t)
	c := g.anthropic(keyTeam, aoption.WithHeader("anthropic-version", "2023-06-01"), aoption.WithHeader("anthropic-beta", "prompt-caching-2024-07-31"))
	msg, err := c.Messages.New(ctx, messageParams("mixed", 256), aoption.WithHeader("x-request-id", "msg-json"))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Usage.OutputTokens != 7 || msg.Usage.CacheReadInputTokens != 2 || msg.Usage.CacheCreationInputTokens != 3 || msg.Content[0].Text == "" {
		t.Fatalf("message %+v", msg)
	}
	stream := c.Messages.NewStreaming(ctx, messageParams("mixed", 256), aoption.WithHeader("x-request-id", "msg-sse"))
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil || acc.Usage.OutputTokens != 7 || acc.Content[0].Text != msg.Content[0].Text {
		t.Fatalf("stream: %v, accumulated %+v", err, acc)
	}

	for _, id := range []string{"msg-json", "msg-sse"} {
		rec, ok := waitRecord(t, g.sim, id)
		if !ok || rec.Cluster != (contract.Pool{Alias: "mixed", Family: config.FamilyAnthropicMessages}).Cluster() || len(rec.Attempts) != 1 {
			t.Fatalf("%s: sim record %+v", id, rec)
		}
		h := rec.Attempts[0].Header
		if k := h.Get("x-api-key"); k != "ant-secret-1" && k != "ant-secret-2" {
			t.Errorf("%s: upstream x-api-key %q", id, k)
		}
		if h.Get("authorization") != "" {
			t.Errorf("%s: a bearer reached the Anthropic backend", id)
		}
		if h.Get("anthropic-version") != "2023-06-01" || h.Get("anthropic-beta") != "prompt-caching-2024-07-31" {
			t.Errorf("%s: anthropic headers %q %q", id, h.Get("anthropic-version"), h.Get("anthropic-beta"))
		}
	}
	if n := len(g.oai.Requests()); n != 0 {
		t.Errorf("the OpenAI backend got %d Messages requests", n)
	}
	want, cost := billed(priceAnt, served(g.ant)...)
	if want.CacheWriteTokens != 6 {
		t.Fatalf("the mock reported %+v", want)
	}
	waitFor(t, "ledger equal to the provider's usage", func() bool {
		r, err := g.ledger.Query(ctx, "team", month())
		return err == nil && r.Total.Requests == 2 && r.Total.Streamed == 1 && r.Total.InputTokens == want.PromptTokens &&
			r.Total.OutputTokens == want.CompletionTokens && r.Total.CachedTokens == want.CachedTokens && r.Total.Cost == cost
	})
}

// TestCountTokensNotBilled: count_tokens is admitted and routed to an
// Anthropic backend with its credential, and costs nothing.
func TestCountTokensNotBilled(t *testing.T) {
	g := startFamilies(t)
	ctx := testCtx(t)
	c := g.anthropic(keyTeam)
	n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "claude",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello to the gateway."))}},
		aoption.WithHeader("x-request-id", "count-1"))
	if err != nil || n.InputTokens == 0 {
		t.Fatalf("count_tokens: %v %+v", err, n)
	}
	rec, ok := waitRecord(t, g.sim, "count-1")
	if !ok || len(rec.Attempts) != 1 || rec.Attempts[0].Path != "/v1/messages/count_tokens" || rec.Attempts[0].Header.Get("x-api-key") == "" {
		t.Fatalf("sim record %+v", rec)
	}
	// A billed message after it: the ledger holds that one only.
	msg, err := c.Messages.New(ctx, messageParams("claude", 64))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the message in the ledger", func() bool {
		r, err := g.ledger.Query(ctx, "team", month())
		return err == nil && r.Total.Requests >= 1
	})
	time.Sleep(100 * time.Millisecond)
	r, err := g.ledger.Query(ctx, "team", month())
	if err != nil || r.Total.Requests != 1 || r.Total.OutputTokens != msg.Usage.OutputTokens {
		t.Fatalf("ledger %+v (%v)", r.Total, err)
	}
}

// TestFamiliesFailover: a 429 (and Anthropic's 529) from every key of the
// first backend moves the request to the next backend of the same family,
// JSON and stream, with that backend's credential.
func TestFamiliesFailover(t *testing.T) {
	tests := []struct {
		name     string
		behavior mockupstream.Behavior
	}{
		{"429", mockupstreamRateLimited()},
		{"529", mockupstream.Behavior{Action: mockupstream.ActError, Status: 529}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := startFamilies(t)
			ctx := testCtx(t)
			g.oai.SetDefaultBehavior(tc.behavior)
			g.ant.SetDefaultBehavior(tc.behavior)
			oc := g.client(keyTeam)
			if _, err := oc.Responses.New(ctx, responseParams("gpt-resp"), option.WithHeader("x-request-id", "fo-resp-json")); err != nil {
				t.Fatal(err)
			}
			s := oc.Responses.NewStreaming(ctx, responseParams("gpt-resp"), option.WithHeader("x-request-id", "fo-resp-sse"))
			for s.Next() {
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			ac := g.anthropic(keyTeam)
			if _, err := ac.Messages.New(ctx, messageParams("claude", 64), aoption.WithHeader("x-request-id", "fo-msg-json")); err != nil {
				t.Fatal(err)
			}
			ms := ac.Messages.NewStreaming(ctx, messageParams("claude", 64), aoption.WithHeader("x-request-id", "fo-msg-sse"))
			for ms.Next() {
			}
			if err := ms.Err(); err != nil {
				t.Fatal(err)
			}
			check := func(id, header, want string) {
				t.Helper()
				rec, ok := waitRecord(t, g.sim, id)
				if !ok || len(rec.Attempts) < 2 || rec.Status != 200 {
					t.Fatalf("%s: sim record %+v", id, rec)
				}
				first, last := rec.Attempts[0], rec.Attempts[len(rec.Attempts)-1]
				if first.Status != tc.behavior.Status && !(first.Status == 429 && tc.behavior.Status == 0) {
					t.Errorf("%s: first attempt %d", id, first.Status)
				}
				if got := last.Header.Get(header); got != want {
					t.Errorf("%s: last attempt %s %q, want %q", id, header, got, want)
				}
			}
			check("fo-resp-json", "authorization", "Bearer oai-relay-secret-1")
			check("fo-resp-sse", "authorization", "Bearer oai-relay-secret-1")
			check("fo-msg-json", "x-api-key", "ant-b-secret-1")
			check("fo-msg-sse", "x-api-key", "ant-b-secret-1")
		})
	}
}

// TestFamiliesRefuseInTheirShape: the gateway's own refusals (key, model,
// limits, budget) reach each SDK as its own error type, JSON and stream.
func TestFamiliesRefuseInTheirShape(t *testing.T) {
	g := startFamilies(t)
	ctx := testCtx(t)
	tests := []struct {
		name, key, model string
		maxTokens        int64
		status           int
		anthropicType    string
		openaiCode       string
	}{
		{"unknown key", "sk-wrong", "mixed", 64, 401, "authentication_error", "invalid_api_key"},
		{"model not allowed", keyLimited, "gpt-resp", 64, 403, "permission_error", "model_not_allowed"},
		{"tokens per minute", keyLimited, "mixed", 4096, 429, "rate_limit_error", "rate_limit_exceeded"},
		{"budget", keyBroke, "mixed", 64, 0, "billing_error", "budget_exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Anthropic: the hard-capped budget is billing_error, 402.
			wantA := tc.status
			if tc.anthropicType == "billing_error" {
				wantA = 402
			}
			ac := g.anthropic(tc.key)
			_, jerr := ac.Messages.New(ctx, messageParams(tc.model, tc.maxTokens))
			s := ac.Messages.NewStreaming(ctx, messageParams(tc.model, tc.maxTokens))
			for s.Next() {
			}
			for _, err := range []error{jerr, s.Err()} {
				var ae *anthropic.Error
				if !errors.As(err, &ae) || ae.StatusCode != wantA || string(ae.Type()) != tc.anthropicType || ae.Message == "" {
					t.Errorf("messages: want %d %s, got %v", wantA, tc.anthropicType, err)
				}
			}
			// OpenAI: the budget is 429 insufficient_quota, as OpenAI says it.
			wantO := tc.status
			if wantO == 0 {
				wantO = 429
			}
			p := responseParams(tc.model)
			p.MaxOutputTokens = openai.Int(tc.maxTokens)
			oc := g.client(tc.key)
			_, jerr = oc.Responses.New(ctx, p)
			rs := oc.Responses.NewStreaming(ctx, p)
			for rs.Next() {
			}
			for _, err := range []error{jerr, rs.Err()} {
				var oe *openai.Error
				if !errors.As(err, &oe) || oe.StatusCode != wantO || oe.Code != tc.openaiCode {
					t.Errorf("responses: want %d %s, got %v", wantO, tc.openaiCode, err)
				}
			}
		})
	}
	if n := len(g.oai.Requests()) + len(g.ant.Requests()); n != 0 {
		t.Errorf("refused requests reached a provider: %d", n)
	}
}
