package extproc

import (
	"net/http"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/extproc/admit"
	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/internal/subkey"
)

// An admission step's refusal reaches the client as the hand-built errors
// did: status, body in the client's shape, Retry-After rounded up to whole
// seconds (at least 1) first, then the step's headers, then the request id.
func TestRefusalRendering(t *testing.T) {
	tests := []struct {
		name    string
		x       *admit.Refusal
		shape   family.ErrorShape
		status  int
		body    string
		headers [][2]string
	}{
		{name: "keys busy", x: admit.KeysExhausted("chat", 1500*time.Millisecond, false), shape: family.OpenAI, status: 429,
			body:    `{"error":{"message":"Every upstream key for ` + "`chat`" + ` is rate limited or busy; retry after the indicated time.","type":"rate_limit_error","param":null,"code":"upstream_keys_exhausted"}}`,
			headers: [][2]string{{"content-type", "application/json"}, {"retry-after", "2"}, {"x-request-id", "sg-1"}}},
		{name: "keys failing, Anthropic", x: admit.KeysExhausted("chat", 0, true), shape: family.Anthropic, status: 529,
			body:    `{"type":"error","error":{"type":"overloaded_error","message":"Every upstream key for ` + "`chat`" + ` is failing; retry later."}}`,
			headers: [][2]string{{"content-type", "application/json"}, {"retry-after", "1"}, {"request-id", "sg-1"}}},
		{name: "step headers after Retry-After", shape: family.OpenAI, status: 429,
			x: &admit.Refusal{Status: http.StatusTooManyRequests, Type: "tokens", Code: "rate_limit_exceeded", Message: "m", Retry: true,
				Headers: []admit.Header{{Key: "x-ratelimit-limit-tokens", Value: "10"}}},
			body:    `{"error":{"message":"m","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`,
			headers: [][2]string{{"content-type", "application/json"}, {"retry-after", "1"}, {"x-ratelimit-limit-tokens", "10"}, {"x-request-id", "sg-1"}}},
		{name: "revoked key, Anthropic", x: admit.KeyRefused(subkey.Revoked), shape: family.Anthropic, status: 401,
			body:    `{"type":"error","error":{"type":"authentication_error","message":"This API key has been revoked.","code":"key_revoked"}}`,
			headers: [][2]string{{"content-type", "application/json"}, {"request-id", "sg-1"}}},
		{name: "expired key", x: admit.KeyRefused(subkey.Expired), shape: family.OpenAI, status: 401,
			body:    `{"error":{"message":"This API key has expired.","type":"invalid_request_error","param":null,"code":"key_expired"}}`,
			headers: [][2]string{{"content-type", "application/json"}, {"x-request-id", "sg-1"}}},
		{name: "no Retry-After", x: admit.BadRequest("bad", "invalid_value", "model"), shape: family.OpenAI, status: 400,
			body:    `{"error":{"message":"bad","type":"invalid_request_error","param":"model","code":"invalid_value"}}`,
			headers: [][2]string{{"content-type", "application/json"}, {"x-request-id", "sg-1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &routerStream{}
			r.f.Shape, r.f.RequestID = tt.shape, "sg-1"
			ir := r.answerError(fromRefusal(tt.x)).GetImmediateResponse()
			if int(ir.GetStatus().GetCode()) != tt.status || string(ir.GetBody()) != tt.body || ir.GetDetails() != "swarmgate_"+tt.x.Code {
				t.Fatalf("got %d %s (%s)", ir.GetStatus().GetCode(), ir.GetBody(), ir.GetDetails())
			}
			hs := ir.GetHeaders().GetSetHeaders()
			if len(hs) != len(tt.headers) {
				t.Fatalf("headers %v", hs)
			}
			for i, h := range tt.headers {
				if hs[i].GetHeader().GetKey() != h[0] || string(hs[i].GetHeader().GetRawValue()) != h[1] {
					t.Errorf("header %d: %v, want %v", i, hs[i].GetHeader(), h)
				}
			}
		})
	}
}
