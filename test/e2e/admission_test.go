package e2e

import (
	"errors"
	"testing"

	"github.com/openai/openai-go/v3"
)

// Admission refusals come from the real reserver (Redis): a token limit the
// request cannot fit, and a spent hard-capped budget. Both are 429s the SDK
// parses, with Retry-After.
func TestAdmissionRefusals(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	tests := []struct {
		name, key, model, code string
		limitHeader            bool
	}{
		{"token limit", keyLimited, "solo", "rate_limit_exceeded", true},
		{"budget hard cap", keyBroke, "gpt-4o-mini", "budget_exceeded", false},
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
			if apiErr.StatusCode != 429 || apiErr.Code != tc.code || h.Get("retry-after") == "" {
				t.Errorf("got %d %q retry-after %q: %s", apiErr.StatusCode, apiErr.Code, h.Get("retry-after"), apiErr.Message)
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
