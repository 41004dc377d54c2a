package e2e

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// checkAttempt: the attempt went to the backend's family path with only
// that backend's credential.
func checkAttempt(t *testing.T, id string, a attemptView, path, authHeader, secret string) {
	t.Helper()
	if a.Path != path {
		t.Errorf("%s: upstream path %q, want %q", id, a.Path, path)
	}
	if got := a.Header.Get(authHeader); got != secret {
		t.Errorf("%s: upstream %s %q, want %q", id, authHeader, got, secret)
	}
	other := "x-api-key"
	if authHeader == "x-api-key" {
		other = "authorization"
	}
	if a.Header.Get(other) != "" {
		t.Errorf("%s: %s reached the backend too", id, other)
	}
}

type attemptView struct {
	Path   string
	Header http.Header
}

func lastAttempt(t *testing.T, g *translationGateway, id string) (attemptView, int) {
	t.Helper()
	rec, ok := waitRecord(t, g.sim, id)
	if !ok || len(rec.Attempts) == 0 {
		t.Fatalf("%s: sim record %+v", id, rec)
	}
	a := rec.Attempts[len(rec.Attempts)-1]
	return attemptView{a.Path, a.Header}, len(rec.Attempts)
}

// TestTranslateMessagesToChat: anthropic-sdk-go on a model served only by
// a chat completions relay, JSON and stream. The relay gets a chat request
// (its path, its bearer, the target's model name, usage asked for in the
// stream, no anthropic-* header); the SDK gets a Message with the relay's
// text and usage in Anthropic's terms; the ledger equals the relay's usage.
func TestTranslateMessagesToChat(t *testing.T) {
	g := startTranslation(t)
	ctx := testCtx(t)
	c := g.anthropic(keyTeam, aoption.WithHeader("anthropic-version", "2023-06-01"), aoption.WithHeader("anthropic-beta", "prompt-caching-2024-07-31"))
	msg, err := c.Messages.New(ctx, messageParams("claude-cheap", 256), aoption.WithHeader("x-request-id", "m2c-json"))
	if err != nil {
		t.Fatal(err)
	}
	recs := g.relay.Requests()
	if len(recs) != 1 || recs[0].Endpoint != "chat" || recs[0].Model != "relay-model" || recs[0].MaxTokens != 256 {
		t.Fatalf("relay records %+v", recs)
	}
	rj := recs[0]
	if len(msg.Content) == 0 || msg.Content[0].Text == "" || msg.StopReason != anthropic.StopReasonEndTurn ||
		msg.Usage.OutputTokens != int64(rj.CompletionTokens) || msg.Usage.CacheReadInputTokens != int64(rj.CachedTokens) ||
		msg.Usage.InputTokens != int64(rj.PromptTokens-rj.CachedTokens) {
		t.Fatalf("message %+v for relay usage %+v", msg, rj)
	}
	stream := c.Messages.NewStreaming(ctx, messageParams("claude-cheap", 256), aoption.WithHeader("x-request-id", "m2c-sse"))
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil || len(acc.Content) == 0 || acc.Content[0].Text != msg.Content[0].Text ||
		acc.Usage.OutputTokens != msg.Usage.OutputTokens || acc.StopReason != anthropic.StopReasonEndTurn {
		t.Fatalf("stream: %v, accumulated %+v", err, acc)
	}
	if recs := g.relay.Requests(); len(recs) != 2 || !recs[1].Stream || !recs[1].IncludeUsage {
		t.Fatalf("relay records %+v", recs)
	}
	for _, id := range []string{"m2c-json", "m2c-sse"} {
		a, _ := lastAttempt(t, g, id)
		checkAttempt(t, id, a, "/openai/v1/chat/completions", "authorization", "Bearer oai-relay-secret-1")
		noAnthropicHeaders(t, a.Header)
	}
	want, cost := billed(priceOAI, served(g.relay)...)
	waitFor(t, "ledger equal to the relay's usage", func() bool {
		r, err := g.ledger.Query(ctx, "team", month())
		return err == nil && r.Total.Requests == 2 && r.Total.Streamed == 1 && r.Total.InputTokens == want.PromptTokens &&
			r.Total.OutputTokens == want.CompletionTokens && r.Total.CachedTokens == want.CachedTokens &&
			r.Total.ReasoningTokens == want.ReasoningTokens && r.Total.Cost == cost
	})
}

// TestTranslateChatToMessages: openai-go chat completions on a model served
// only by an Anthropic provider, JSON and stream (with and without the
// usage chunk). The provider gets a Messages request with its x-api-key and
// anthropic-version; the SDK gets OpenAI's shapes with every prompt token
// (cache reads and writes included) in prompt_tokens; the ledger equals
// the provider's usage with cache reads and writes priced apart.
func TestTranslateChatToMessages(t *testing.T) {
	g := startTranslation(t)
	ctx := testCtx(t)
	c := g.client(keyTeam)
	p := openai.ChatCompletionNewParams{Model: "gpt-on-claude", MaxTokens: openai.Int(128),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Say hello to the gateway.")}}
	resp, err := c.Chat.Completions.New(ctx, p, option.WithHeader("x-request-id", "c2m-json"))
	if err != nil {
		t.Fatal(err)
	}
	recs := g.ant.Requests()
	if len(recs) != 1 || recs[0].Endpoint != "messages" || recs[0].Model != "claude-upstream" || recs[0].MaxTokens != 128 {
		t.Fatalf("provider records %+v", recs)
	}
	rj := recs[0]
	if len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" || resp.Choices[0].FinishReason != "stop" ||
		resp.Usage.PromptTokens != int64(rj.PromptTokens) || resp.Usage.CompletionTokens != int64(rj.CompletionTokens) ||
		resp.Usage.PromptTokensDetails.CachedTokens != int64(rj.CachedTokens) {
		t.Fatalf("completion %+v for provider usage %+v", resp, rj)
	}
	for _, usage := range []bool{true, false} {
		sp := p
		if usage {
			sp.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		id := "c2m-sse-" + map[bool]string{true: "usage", false: "plain"}[usage]
		s := c.Chat.Completions.NewStreaming(ctx, sp, option.WithHeader("x-request-id", id))
		acc := openai.ChatCompletionAccumulator{}
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil || len(acc.Choices) != 1 || acc.Choices[0].Message.Content != resp.Choices[0].Message.Content ||
			acc.Choices[0].FinishReason != "stop" {
			t.Fatalf("%s: %v, accumulated %+v", id, err, acc.ChatCompletion)
		}
		if usage != (acc.Usage.CompletionTokens == int64(rj.CompletionTokens)) {
			t.Errorf("%s: usage %+v (asked: %v)", id, acc.Usage, usage)
		}
	}
	for _, id := range []string{"c2m-json", "c2m-sse-usage", "c2m-sse-plain"} {
		a, _ := lastAttempt(t, g, id)
		checkAttempt(t, id, a, "/v1/messages", "x-api-key", "ant-secret-1")
		if a.Header.Get("anthropic-version") != "2023-06-01" {
			t.Errorf("%s: anthropic-version %q", id, a.Header.Get("anthropic-version"))
		}
	}
	want, cost := billed(priceAnt, served(g.ant)...)
	waitFor(t, "ledger equal to the provider's usage", func() bool {
		r, err := g.ledger.Query(ctx, "team", month())
		return err == nil && r.Total.Requests == 3 && r.Total.Streamed == 2 && r.Total.InputTokens == want.PromptTokens &&
			r.Total.OutputTokens == want.CompletionTokens && r.Total.CachedTokens == want.CachedTokens && r.Total.Cost == cost
	})
}

// TestTranslateResponsesToChat: openai-go's Responses API on a model served
// only by a chat completions relay, JSON and stream.
func TestTranslateResponsesToChat(t *testing.T) {
	g := startTranslation(t)
	ctx := testCtx(t)
	c := g.client(keyTeam)
	rp := responseParams("claude-cheap")
	rp.Temperature = openai.Float(0.25)
	resp, err := c.Responses.New(ctx, rp, option.WithHeader("x-request-id", "r2c-json"))
	if err != nil {
		t.Fatal(err)
	}
	// A Response repeats its request: the client's own values, not defaults.
	if resp.Instructions.OfString != "Be brief." || resp.Temperature != 0.25 {
		t.Errorf("echo: instructions %q, temperature %v", resp.Instructions.OfString, resp.Temperature)
	}
	recs := g.relay.Requests()
	if len(recs) != 1 || recs[0].Endpoint != "chat" || recs[0].Model != "relay-model" {
		t.Fatalf("relay records %+v", recs)
	}
	rj := recs[0]
	if resp.OutputText() == "" || resp.Status != responses.ResponseStatusCompleted || resp.Usage.InputTokens != int64(rj.PromptTokens) ||
		resp.Usage.OutputTokens != int64(rj.CompletionTokens) || resp.Usage.InputTokensDetails.CachedTokens != int64(rj.CachedTokens) ||
		resp.Usage.OutputTokensDetails.ReasoningTokens != int64(rj.ReasoningTokens) {
		t.Fatalf("response %+v for relay usage %+v", resp, rj)
	}
	s := c.Responses.NewStreaming(ctx, responseParams("claude-cheap"), option.WithHeader("x-request-id", "r2c-sse"))
	var text strings.Builder
	var done responses.Response
	for s.Next() {
		switch ev := s.Current(); ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			done = ev.Response
		}
	}
	if err := s.Err(); err != nil || text.String() != resp.OutputText() || done.OutputText() != resp.OutputText() ||
		done.Usage.OutputTokens != resp.Usage.OutputTokens || done.Instructions.OfString != "Be brief." {
		t.Fatalf("stream: %v, text %q, completed %+v", err, text.String(), done)
	}
	for _, id := range []string{"r2c-json", "r2c-sse"} {
		a, _ := lastAttempt(t, g, id)
		checkAttempt(t, id, a, "/openai/v1/chat/completions", "authorization", "Bearer oai-relay-secret-1")
	}
	want, cost := billed(priceOAI, served(g.relay)...)
	waitFor(t, "ledger equal to the relay's usage", func() bool {
		r, err := g.ledger.Query(ctx, "team", month())
		return err == nil && r.Total.Requests == 2 && r.Total.InputTokens == want.PromptTokens && r.Total.OutputTokens == want.CompletionTokens &&
			r.Total.CachedTokens == want.CachedTokens && r.Total.ReasoningTokens == want.ReasoningTokens && r.Total.Cost == cost
	})
	// A request that needs the server's state has no translation.
	p := responseParams("claude-cheap")
	p.PreviousResponseID = openai.String("resp_abc")
	_, err = c.Responses.New(ctx, p)
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 400 || oe.Param != "previous_response_id" {
		t.Fatalf("previous_response_id on a chat relay: %v", err)
	}
}

// TestTranslatedFailover: on a model with a chat relay first and an
// Anthropic provider second, the relay's 429 moves each request to the
// provider, where it is translated (chat client) or not (Messages client):
// every attempt has the body, path and credential of its own backend.
func TestTranslatedFailover(t *testing.T) {
	g := startTranslation(t)
	ctx := testCtx(t)
	g.relay.SetDefaultBehavior(mockupstreamRateLimited())
	ac := g.anthropic(keyTeam)
	if _, err := ac.Messages.New(ctx, messageParams("either", 64), aoption.WithHeader("x-request-id", "fo-m-json")); err != nil {
		t.Fatal(err)
	}
	ms := ac.Messages.NewStreaming(ctx, messageParams("either", 64), aoption.WithHeader("x-request-id", "fo-m-sse"))
	for ms.Next() {
	}
	if err := ms.Err(); err != nil {
		t.Fatal(err)
	}
	oc := g.client(keyTeam)
	cr, err := oc.Chat.Completions.New(ctx, chatParams("either"), option.WithHeader("x-request-id", "fo-c-json"))
	if err != nil || cr.Choices[0].Message.Content == "" {
		t.Fatalf("chat: %v %+v", err, cr)
	}
	cs := oc.Chat.Completions.NewStreaming(ctx, chatParams("either"), option.WithHeader("x-request-id", "fo-c-sse"))
	acc := openai.ChatCompletionAccumulator{}
	for cs.Next() {
		acc.AddChunk(cs.Current())
	}
	if err := cs.Err(); err != nil || acc.Choices[0].Message.Content == "" {
		t.Fatalf("chat stream: %v %+v", err, acc.ChatCompletion)
	}
	// Responses has no Anthropic translation: its retry goes to the
	// second chat relay, translated again.
	rr, err := oc.Responses.New(ctx, responseParams("two-relays"), option.WithHeader("x-request-id", "fo-r-json"))
	if err != nil || rr.OutputText() == "" {
		t.Fatalf("responses: %v %+v", err, rr)
	}
	rs := oc.Responses.NewStreaming(ctx, responseParams("two-relays"), option.WithHeader("x-request-id", "fo-r-sse"))
	for rs.Next() {
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"fo-r-json", "fo-r-sse"} {
		a, _ := lastAttempt(t, g, id)
		checkAttempt(t, id, a, "/v1/chat/completions", "authorization", "Bearer oai-secret-1")
	}
	rec, ok := waitRecord(t, g.sim, "fo-m-json")
	if !ok || len(rec.Attempts) != 2 || rec.Attempts[0].Status != 429 || rec.Cluster != (contract.Pool{Alias: "either"}).Cluster() {
		t.Fatalf("first request: %+v", rec)
	}
	first := attemptView{rec.Attempts[0].Path, rec.Attempts[0].Header}
	checkAttempt(t, "fo-m-json first", first, "/openai/v1/chat/completions", "authorization", "Bearer oai-relay-secret-1")
	for _, id := range []string{"fo-m-json", "fo-m-sse", "fo-c-json", "fo-c-sse"} {
		a, _ := lastAttempt(t, g, id)
		checkAttempt(t, id, a, "/v1/messages", "x-api-key", "ant-secret-1")
	}
	want, cost := billed(priceAnt, served(g.ant)...)
	wantB, costB := billed(priceOAI, served(g.relayB)...)
	waitFor(t, "ledger equal to the providers' usage", func() bool {
		r, err := g.ledger.Query(ctx, "team", month())
		return err == nil && r.Total.Requests == 6 && r.Total.InputTokens == want.PromptTokens+wantB.PromptTokens &&
			r.Total.OutputTokens == want.CompletionTokens+wantB.CompletionTokens && r.Total.Cost == cost+costB
	})
}

// TestTranslatedRefusals: the gateway's refusals on translated models
// reach each SDK in its own family's shape, and what the backend family
// cannot express is a 400 naming the field, before any provider is asked.
func TestTranslatedRefusals(t *testing.T) {
	g := startTranslation(t)
	ctx := testCtx(t)
	tests := []struct {
		name, key       string
		maxTokens       int64
		anthropicStatus int
		anthropicType   string
		openaiStatus    int
		openaiCode      string
	}{
		{"tokens per minute", keyLimited, 4096, 429, "rate_limit_error", 429, "rate_limit_exceeded"},
		{"budget", keyBroke, 64, 402, "billing_error", 429, "budget_exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ac := g.anthropic(tc.key)
			_, jerr := ac.Messages.New(ctx, messageParams("claude-cheap", tc.maxTokens))
			s := ac.Messages.NewStreaming(ctx, messageParams("claude-cheap", tc.maxTokens))
			for s.Next() {
			}
			for _, err := range []error{jerr, s.Err()} {
				var ae *anthropic.Error
				if !errors.As(err, &ae) || ae.StatusCode != tc.anthropicStatus || string(ae.Type()) != tc.anthropicType {
					t.Errorf("messages: want %d %s, got %v", tc.anthropicStatus, tc.anthropicType, err)
				}
			}
			oc := g.client(tc.key)
			rp := responseParams("claude-cheap")
			rp.MaxOutputTokens = openai.Int(tc.maxTokens)
			_, rerr := oc.Responses.New(ctx, rp)
			rs := oc.Responses.NewStreaming(ctx, rp)
			for rs.Next() {
			}
			for _, err := range []error{rerr, rs.Err()} {
				var oe *openai.Error
				if !errors.As(err, &oe) || oe.StatusCode != tc.openaiStatus || oe.Code != tc.openaiCode {
					t.Errorf("responses: want %d %s, got %v", tc.openaiStatus, tc.openaiCode, err)
				}
			}
			p := chatParams("gpt-on-claude")
			p.MaxTokens = openai.Int(tc.maxTokens)
			_, jerr = oc.Chat.Completions.New(ctx, p)
			cs := oc.Chat.Completions.NewStreaming(ctx, p)
			for cs.Next() {
			}
			for _, err := range []error{jerr, cs.Err()} {
				var oe *openai.Error
				if !errors.As(err, &oe) || oe.StatusCode != tc.openaiStatus || oe.Code != tc.openaiCode {
					t.Errorf("chat: want %d %s, got %v", tc.openaiStatus, tc.openaiCode, err)
				}
			}
		})
	}
	t.Run("untranslatable", func(t *testing.T) {
		ac := g.anthropic(keyTeam)
		_, err := ac.Messages.New(ctx, messageParams("claude-cheap", 64), aoption.WithJSONSet("top_k", 5))
		var ae *anthropic.Error
		if !errors.As(err, &ae) || ae.StatusCode != 400 || string(ae.Type()) != "invalid_request_error" || !strings.Contains(ae.Error(), "top_k") {
			t.Errorf("top_k on a chat relay: %v", err)
		}
		oc := g.client(keyTeam)
		cp := chatParams("gpt-on-claude")
		cp.N = openai.Int(2)
		_, err = oc.Chat.Completions.New(ctx, cp)
		var oe *openai.Error
		if !errors.As(err, &oe) || oe.StatusCode != 400 || oe.Param != "n" {
			t.Errorf("n=2 on an Anthropic provider: %v", err)
		}
	})
	t.Run("untranslatable goes native", func(t *testing.T) {
		// On a model with a native backend too, the request goes there.
		ac := g.anthropic(keyTeam)
		if _, err := ac.Messages.New(ctx, messageParams("either", 64), aoption.WithJSONSet("top_k", 5),
			aoption.WithHeader("x-request-id", "native-only")); err != nil {
			t.Fatal(err)
		}
		rec, ok := waitRecord(t, g.sim, "native-only")
		if !ok || rec.Cluster != (contract.Pool{Alias: "either", Family: config.FamilyAnthropicMessages, Native: true}).Cluster() || len(rec.Attempts) != 1 {
			t.Fatalf("sim record %+v", rec)
		}
	})
	if n := len(g.relay.Requests()); n != 0 {
		t.Errorf("refused requests reached the relay: %d", n)
	}
}

// TestCountTokensWithoutAnthropicBackend: count_tokens on a model no
// Anthropic backend serves is the gateway's estimate, marked as one, and
// asks no provider.
func TestCountTokensWithoutAnthropicBackend(t *testing.T) {
	g := startTranslation(t)
	ctx := testCtx(t)
	c := g.anthropic(keyTeam)
	var raw *http.Response
	n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "claude-cheap",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello to the gateway."))}}, aoption.WithResponseInto(&raw))
	if err != nil || n.InputTokens <= 0 || raw.Header.Get(contract.HeaderEstimated) != "true" {
		t.Fatalf("count_tokens: %v %+v", err, n)
	}
	_, _ = io.Copy(io.Discard, raw.Body)
	if len(g.relay.Requests()) != 0 {
		t.Fatal("count_tokens reached the relay")
	}
	// On a model with an Anthropic backend too, count_tokens goes there
	// only (the cluster of native speakers), and the provider counts.
	n, err = c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "either",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello to the gateway."))}},
		aoption.WithHeader("x-request-id", "count-either"))
	if err != nil || n.InputTokens <= 0 {
		t.Fatalf("count_tokens on either: %v %+v", err, n)
	}
	rec, ok := waitRecord(t, g.sim, "count-either")
	if !ok || rec.Cluster != (contract.Pool{Alias: "either", Family: config.FamilyAnthropicMessages, Native: true}).Cluster() || len(rec.Attempts) != 1 ||
		rec.Attempts[0].Path != "/v1/messages/count_tokens" {
		t.Fatalf("sim record %+v", rec)
	}
}

var _ = mockupstream.ActOK
