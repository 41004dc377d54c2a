package e2e

import (
	"errors"
	"testing"

	"github.com/openai/openai-go/v3"
)

// Admission refusals come from the real reserver (Redis): a token limit the
// request can never fit (larger than the whole window: final, no
// Retry-After, x-should-retry: false), and a spent hard-capped budget
// (Retry-After: the month's end). Both are 429s the SDK parses.
func TestAdmissionRefusals(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	tests := []struct {
		name, key, model, code string
		limitHeader, final     bool
	}{
		{"token limit", keyLimited, "solo", "rate_limit_exceeded", true, true},
		{"budget hard cap", keyBroke, "gpt-4o-mini", "budget_exceeded", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := chatParams(tc.model)
			p.MaxTokens = openai.Int(100)
			_, err := g.chat(tc.key).New(ctx, p)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("error %v", err)
			}
			h := apiErr.Response.Header
			if apiErr.StatusCode != 429 || apiErr.Code != tc.code || (h.Get("retry-after") == "") != tc.final ||
				(h.Get("x-should-retry") == "false") != tc.final {
				t.Errorf("got %d %q retry-after %q x-should-retry %q: %s", apiErr.StatusCode, apiErr.Code, h.Get("retry-after"),
					h.Get("x-should-retry"), apiErr.Message)
			}
			if tc.limitHeader && h.Get("x-ratelimit-limit-tokens") != "60" {
				t.Errorf("x-ratelimit-limit-tokens %q", h.Get("x-ratelimit-limit-tokens"))
			}
		})
	}
	if n := len(g.relayA.Requests()) + len(g.relayB.Requests()); n != 0 {
		t.Errorf("%d refused requests reached a relay", n)
	}
}

// An upstream reset mid-stream ends the ext_proc stream without
// end_of_stream; the request is still billed (bill_on_disconnect
// "reported": no usage arrived, so the delivered content) and marked
// partial in the ledger.
func TestUpstreamResetMidStreamIsBilled(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	for _, k := range []string{"relay-a-1", "relay-a-2"} {
		g.relayA.SetBehavior(k, mockupstreamResetMidStream())
	}
	s := g.chat(keyTeam).NewStreaming(ctx, chatParams("solo"))
	chunks := 0
	for s.Next() {
		chunks++
	}
	if s.Err() == nil {
		t.Fatalf("stream ended cleanly after %d chunks", chunks)
	}
	waitFor(t, "partial ledger entry", func() bool {
		r, err := g.ledger.Query(ctx, "team", month())
		return err == nil && r.Total.Partial == 1 && r.Total.Requests == 1 && r.Total.InputTokens > 0 && r.Total.OutputTokens > 0
	})
}
