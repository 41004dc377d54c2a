package extproc_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// The router-level filter sees every answer before the client does,
// Envoy's local replies included (they pass its encode path in 1.38). Some
// must not reach an OpenAI client as they are.
func TestRouterReplacesAnswers(t *testing.T) {
	tests := []struct {
		name     string
		headers  []string
		status   int
		code     string // "" when the answer passes through
		retryHdr bool
		empty    bool // headers only: the reply ends with them
	}{
		{"a provider's 401 for our pooled key", []string{":status", "401", "content-type", "application/json", contract.HeaderBackend, "big"},
			http.StatusServiceUnavailable, "upstream_credentials_rejected", true, false},
		{"a provider's 403 likewise", []string{":status", "403", contract.HeaderBackend, "big"},
			http.StatusServiceUnavailable, "upstream_credentials_rejected", true, false},
		// The keys have room (nothing failing): EDS was behind them, a
		// short 429; with every key failing it is a 503 (admission_test).
		{"Envoy's no healthy upstream while the keys have room", []string{":status", "503", "content-type", "text/plain"},
			http.StatusTooManyRequests, "upstream_unavailable", true, false},
		{"Envoy's upstream timeout", []string{":status", "504", "content-type", "text/plain"},
			http.StatusGatewayTimeout, "upstream_timeout", true, false},
		// An ext_proc filter's own message timeout is an empty reply
		// (headers end the stream): no attempt was sent, nothing billed.
		{"an ext_proc message timeout's empty 504", []string{":status", "504"},
			http.StatusGatewayTimeout, "upstream_timeout", true, true},
		{"the rate-limit filter's 429", []string{":status", "429", "x-envoy-ratelimited", "true", "x-ratelimit-reset", "17"},
			http.StatusTooManyRequests, "rate_limit_exceeded", true, false},
		{"a provider's 429 after retries passes", []string{":status", "429", "content-type", "application/json", contract.HeaderBackend, "big"},
			0, "", false, false},
		{"a provider's 500 passes", []string{":status", "500", "content-type", "application/json", contract.HeaderBackend, "big"},
			0, "", false, false},
		{"the upstream filter's own local reply passes", []string{":status", "429", "content-type", "application/json", contract.HeaderLocal, "upstream_keys_exhausted", "retry-after", "3"},
			0, "", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testConfig(t))
			st, cancel := admit(t, h, chatBody)
			defer cancel()
			resp := roundTrip(t, st, respHeaders(tc.empty, tc.headers...))
			ir := resp.GetImmediateResponse()
			if tc.code == "" {
				if ir != nil {
					t.Fatalf("replaced: %v", ir)
				}
				if rm := resp.GetResponseHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(); !contains(rm, contract.HeaderLocal) {
					t.Errorf("internal response headers not removed: %v", rm)
				}
				return
			}
			if ir == nil || int(ir.GetStatus().GetCode()) != tc.status || !strings.Contains(string(ir.GetBody()), `"code":"`+tc.code+`"`) {
				t.Fatalf("answer %v", resp)
			}
			if tc.retryHdr && setOf(t, ir.GetHeaders())["retry-after"] == "" {
				t.Errorf("no retry-after: %v", ir.GetHeaders())
			}
			h.cap.waitEntry(t)
			h.cap.mu.Lock()
			defer h.cap.mu.Unlock()
			if tc.status == http.StatusGatewayTimeout && !tc.empty {
				// Envoy cut an attempt the provider had: billed as a cut
				// answer (bill_on_disconnect "reported": without a report,
				// the prompt estimate), partial and estimated, settled.
				if len(h.cap.entries) != 1 || len(h.cap.settled) != 1 || len(h.cap.released) != 0 {
					t.Fatalf("entries %+v settled %v released %v; want one billed entry", h.cap.entries, h.cap.settled, h.cap.released)
				}
				if e := h.cap.entries[0]; !e.Disconnected || !e.Estimated || e.Status != 504 || e.Usage.PromptTokens <= 0 {
					t.Errorf("entry %+v; want partial, estimated, status 504, the prompt estimate", e)
				}
				return
			}
			// Not served: the reservation is released, nothing billed.
			if len(h.cap.released) != 1 || len(h.cap.entries) != 0 {
				t.Errorf("released %v entries %v", h.cap.released, h.cap.entries)
			}
		})
	}
}

// A client's x-request-id is a label: two requests with the same one are
// two requests, each with its own identity, reservation and ledger entry.
func TestReusedClientRequestIDIsNotTheIdentity(t *testing.T) {
	h := newHarness(t, testConfig(t))
	ids := map[string]bool{}
	for range 3 {
		md := admission(t, h, chatBody, "x-request-id", "same-id")
		ad, _ := h.srv.ReadAdmission(md)
		ids[ad.RequestID] = true
	}
	if len(ids) != 3 {
		t.Fatalf("3 requests with one client id got %d identities", len(ids))
	}
	if len(h.cap.reserved) != 3 || h.cap.reserved[0].RequestID == h.cap.reserved[1].RequestID {
		t.Fatalf("reservations %+v", h.cap.reserved)
	}
}

// Client header values reused anywhere are labels: control bytes drop them.
func TestClientLabelsAreSanitised(t *testing.T) {
	h := newHarness(t, testConfig(t))
	md := admission(t, h, chatBody, "x-session-id", "s-1\r\nx-evil: 1")
	ad, _ := h.srv.ReadAdmission(md)
	if s := ad.Sticky; strings.ContainsAny(s, "\r\n") || s == "s-1\r\nx-evil: 1" {
		t.Fatalf("sticky value %q", s)
	}
}
