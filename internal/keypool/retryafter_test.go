package keypool

import (
	"errors"
	"strconv"
	"testing"
	"time"
)

// A backend whose keys all rest on the provider's word (Retry-After,
// retry-after-ms, or a 429 naming the exhausted limit's reset) is down for
// EDS without a damper hold. Every refusal in the meantime must say how
// long is really left: the provider's wait plus the EDS settle, counted
// down, never the 1 s "unknown" floor.
func TestRetryAfterWhileTheProviderHoldsEveryKey(t *testing.T) {
	const provider = 10 * time.Second
	for _, tc := range []struct {
		name      string
		threshold int // consecutive_429
		headers   map[string]string
	}{
		{"retry-after", 3, map[string]string{"retry-after": "10"}},
		{"retry-after-ms", 3, map[string]string{"retry-after-ms": "10000"}},
		{"retry-after trips the breaker", 1, map[string]string{"retry-after": "10"}},
		{"reset of the exhausted requests limit", 1, map[string]string{
			"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "10s",
			"x-ratelimit-remaining-tokens": "5000", "x-ratelimit-reset-tokens": "1s"}},
		{"anthropic reset of the exhausted tokens limit", 1, map[string]string{
			"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": "@10s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := testConfig(t, "breaker: {consecutive_429: "+strconv.Itoa(tc.threshold)+", consecutive_5xx: 1, cooldown: 1s, max_cooldown: 5s, sync_interval: 1s, jitter: 0.000001}\n",
				map[string][]key{"b": {{id: "k1"}, {id: "k2"}}})
			p := newPools(t, cfg, Options{Clock: clk})
			h := func(name string) string {
				v := tc.headers[name]
				if v == "@10s" { // an RFC 3339 instant, as Anthropic sends
					return time.Now().Add(provider).UTC().Format(time.RFC3339Nano)
				}
				return v
			}
			// One request: 429 on k1, Envoy retries on k2, 429 again.
			for i := range 2 {
				l := pick(t, p, "b", PickRequest{RequestID: "r1", Attempt: i + 1})
				_ = p.Report(t.Context(), "b", l.KeyID, "r1", ParseOutcome(429, h))
			}
			// The third attempt of the same request has no key: its
			// refusal names the provider's wait, not that of a key this
			// request may no longer use.
			_, err := p.Pick(t.Context(), "b", PickRequest{RequestID: "r1", Attempt: 3})
			var ex *ExhaustedError
			if !errors.As(err, &ex) {
				t.Fatalf("attempt 3: %v", err)
			}
			near(t, "attempt 3", ex.RetryAfter, provider+edsSettle)
			if h := p.BackendHealth(); h["b"] {
				t.Fatal("every key rests, the backend is still healthy")
			}
			// Run sleeps until the keys reopen; it re-armed every
			// millisecond while the down time (past) was the soonest.
			kp := p.pool("b")
			kp.mu.Lock()
			soonest := kp.soonestLocked(clk.Now())
			kp.mu.Unlock()
			near(t, "soonest change", soonest.Sub(clk.Now()), provider)
			start := clk.Now()
			for _, at := range []time.Duration{0, 3 * time.Second, 8 * time.Second, 9900 * time.Millisecond} {
				clk.Advance(start.Add(at).Sub(clk.Now()))
				ok, ra := p.Available([]string{"b"})
				if ok {
					t.Fatalf("at %s: available while every key rests", at)
				}
				near(t, "Available at "+at.String(), ra, provider-at+edsSettle)
			}
			clk.Advance(101 * time.Millisecond) // the provider's wait is over (an instant: a little more)
			if !p.BackendHealth()["b"] {
				t.Fatal("the keys reopened, the backend is still down")
			}
			if ok, ra := p.Available([]string{"b"}); ok || ra != edsSettle {
				t.Fatalf("just back: Available = %v, %s; want false for the EDS settle", ok, ra)
			}
			clk.Advance(edsSettle)
			if ok, _ := p.Available([]string{"b"}); !ok {
				t.Fatal("after the settle the backend admits again")
			}
		})
	}
}

func near(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	// Anthropic's reset is an instant parsed against the wall clock.
	if d := got - want; d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Fatalf("%s: Retry-After %s, want %s", what, got, want)
	}
}
