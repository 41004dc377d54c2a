package extproc_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/keypool"
)

// Envoy's "no healthy upstream" 503 for a pool whose every key rests on the
// provider's Retry-After becomes the keys' 429, whose Retry-After is the
// time left (7 s and the EDS settle), not 1 s; admission then refuses the
// next request with the same figure.
func TestRetryAfterOfARestingPool(t *testing.T) {
	h := newHarness(t, testConfig(t))
	st, cancel := admit(t, h, agentBody) // "agent" is served by "big" only
	defer cancel()
	rest := keypool.ParseOutcome(429, func(n string) string {
		if n == "retry-after" {
			return "7"
		}
		return ""
	})
	for _, k := range []string{"big-1", "big-2"} {
		_ = h.pool.Report(t.Context(), "big", k, "", rest)
	}
	resp := roundTrip(t, st, respHeaders(false, ":status", "503", "content-type", "text/plain"))
	status, hs := immediate(t, resp)
	if status != http.StatusTooManyRequests || !secondsLeft(hs["retry-after"], 8) || hs["x-request-id"] == "" {
		t.Fatalf("replaced answer %d %v, want 429 with Retry-After 8 and the request id", status, hs)
	}

	st2, cancel2 := h.stream(t, contract.RoleRouter)
	defer cancel2()
	roundTrip(t, st2, reqHeaders(false, chatHeaders(keyAlpha)...))
	status, hs = immediate(t, roundTrip(t, st2, reqBody(agentBody)))
	if status != http.StatusTooManyRequests || !secondsLeft(hs["retry-after"], 8) {
		t.Fatalf("admission refusal %d %v, want 429 with Retry-After 8", status, hs)
	}
}

// secondsLeft reports whether a Retry-After counts down from want: want
// itself, or a second less on a slow run (the wait is rounded up from
// what is left when the answer is built).
func secondsLeft(v string, want int) bool {
	n, err := strconv.Atoi(v)
	return err == nil && (n == want || n == want-1)
}
