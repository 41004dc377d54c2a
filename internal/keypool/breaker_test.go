package keypool

import (
	"testing"
	"time"
)

func TestBreakerTransitions(t *testing.T) {
	pol := breakerPolicy{n429: 3, n5xx: 2, cooldown: 10 * time.Second, maxCooldown: time.Minute, probeTTL: time.Minute, honourRemaining: true,
		authCooldown: time.Hour}
	t0 := time.Unix(1000, 0)
	type step struct {
		at    time.Duration // since t0
		o     Outcome
		state State         // after the step, at the same instant
		until time.Duration // expected open period end since t0 (0: not checked)
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"two 429s stay closed, third trips", []step{
			{0, status(429), Closed, 0}, {0, status(429), Closed, 0}, {1 * time.Second, status(429), Open, 11 * time.Second},
		}},
		{"success resets the count", []step{
			{0, status(429), Closed, 0}, {0, status(429), Closed, 0}, {0, status(200), Closed, 0}, {0, status(429), Closed, 0},
		}},
		{"5xx and resets count together", []step{
			{0, status(502), Closed, 0}, {0, Outcome{Reset: true}, Open, 10 * time.Second},
		}},
		{"one 401 takes the key out for the auth cooldown", []step{
			{0, status(401), Open, time.Hour}, {time.Hour, Outcome{}, HalfOpen, 0},
			{time.Hour, status(401), Open, 2 * time.Hour},
		}},
		{"403 likewise, and a probe that works closes", []step{
			{0, status(403), Open, time.Hour}, {time.Hour, status(200), Closed, 0},
		}},
		{"a 401 while open for 429s extends to the auth cooldown", []step{
			{0, status(429), Closed, 0}, {0, status(429), Closed, 0}, {0, status(429), Open, 10 * time.Second},
			{time.Second, status(401), Open, time.Second + time.Hour},
		}},
		{"400 is the caller's fault", []step{
			{0, status(400), Closed, 0}, {0, status(400), Closed, 0}, {0, status(404), Closed, 0},
		}},
		{"half-open after the period, probe success closes", []step{
			{0, status(500), Closed, 0}, {0, status(500), Open, 10 * time.Second},
			{10 * time.Second, Outcome{}, HalfOpen, 0}, {10 * time.Second, status(200), Closed, 0},
		}},
		{"failed probes double the period up to max", []step{
			{0, status(500), Closed, 0}, {0, status(500), Open, 10 * time.Second},
			{10 * time.Second, status(500), Open, 30 * time.Second},
			{30 * time.Second, status(429), Open, 70 * time.Second},
			{70 * time.Second, status(500), Open, 130 * time.Second},
			{130 * time.Second, status(500), Open, 190 * time.Second},
		}},
		{"trip honours a longer Retry-After", []step{
			{0, status(429), Closed, 0}, {0, status(429), Closed, 0},
			{0, Outcome{Status: 429, RetryAfter: 90 * time.Second, RemainingRequests: -1, RemainingTokens: -1}, Open, 90 * time.Second},
		}},
		{"late 429 while open extends to its Retry-After", []step{
			{0, status(500), Closed, 0}, {0, status(500), Open, 10 * time.Second},
			{time.Second, Outcome{Status: 429, RetryAfter: 20 * time.Second, RemainingRequests: -1, RemainingTokens: -1}, Open, 21 * time.Second},
		}},
		{"remaining tokens 0 opens until the token reset, then closed", []step{
			{0, Outcome{Status: 200, RemainingRequests: 5, RemainingTokens: 0, ResetTokens: 1500 * time.Millisecond}, Open, 1500 * time.Millisecond},
			{1500 * time.Millisecond, Outcome{}, Closed, 0},
		}},
		{"remaining 0 without reset uses the cooldown", []step{
			{0, Outcome{Status: 200, RemainingRequests: 0, RemainingTokens: -1}, Open, 10 * time.Second},
		}},
		{"success in the open period does not close", []step{
			{0, status(500), Closed, 0}, {0, status(500), Open, 10 * time.Second}, {time.Second, status(200), Open, 10 * time.Second},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b Breaker
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				b.observe(now, s.o, &pol, 0)
				if got := b.State(now); got != s.state {
					t.Fatalf("step %d: state %s, want %s", i, got, s.state)
				}
				if s.until != 0 && b.OpenUntil() != t0.Add(s.until) {
					t.Fatalf("step %d: open until +%s, want +%s", i, b.OpenUntil().Sub(t0), s.until)
				}
			}
		})
	}
}

func TestBreakerJitter(t *testing.T) {
	pol := breakerPolicy{n429: 1, n5xx: 1, cooldown: 10 * time.Second, maxCooldown: time.Minute, jitter: 0.2}
	now := time.Unix(1000, 0)
	for _, r := range []float64{0, 0.5, 0.999} {
		var b Breaker
		b.observe(now, status(429), &pol, r)
		got := b.OpenUntil().Sub(now)
		want := 10*time.Second + time.Duration(r*0.2*float64(10*time.Second))
		if got != want || got < 10*time.Second || got > 12*time.Second {
			t.Fatalf("jitter %g: open %s, want %s within [10s, 12s]", r, got, want)
		}
	}
}

func TestBreakerOneProbeAtATime(t *testing.T) {
	pol := breakerPolicy{n429: 1, n5xx: 1, cooldown: time.Second, maxCooldown: time.Second, probeTTL: 5 * time.Second}
	now := time.Unix(1000, 0)
	var b Breaker
	b.observe(now, status(500), &pol, 0)
	now = now.Add(time.Second)
	if !b.allow(now) || !b.acquire(now, &pol) {
		t.Fatal("half-open refused the probe")
	}
	if b.allow(now) {
		t.Fatal("second request while the probe is out")
	}
	if !b.allow(now.Add(5 * time.Second)) {
		t.Fatal("a lost probe blocks the key beyond probe TTL")
	}
	b.releaseProbe()
	if !b.allow(now) {
		t.Fatal("released probe slot not free")
	}
}

func TestBreakerAdopt(t *testing.T) {
	now := time.Unix(1000, 0)
	var b Breaker
	open := remoteState{Open: true, Reason: ReasonRateLimited, Until: now.Add(time.Minute), Trips: 2, At: now}
	if !b.adopt(now, open) || b.State(now) != Open || b.trips != 2 {
		t.Fatalf("remote open not adopted: %+v", b)
	}
	if b.adopt(now, open) {
		t.Fatal("same transition applied twice")
	}
	old := remoteState{At: now.Add(-time.Second)}
	if b.adopt(now, old) || b.State(now) != Open {
		t.Fatal("older close overrode a newer open")
	}
	closed := remoteState{At: now.Add(time.Second)}
	if !b.adopt(now, closed) || b.State(now) != Closed || b.trips != 0 {
		t.Fatalf("remote probe success not adopted: %+v", b)
	}
	expired := remoteState{Open: true, Until: now.Add(-time.Second), At: now.Add(2 * time.Second)}
	if b.adopt(now, expired) {
		t.Fatal("an open period already over was adopted")
	}
}

func TestParseOutcome(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name    string
		status  int
		headers map[string]string
		want    Outcome
	}{
		{"none", 200, nil, Outcome{Status: 200, RemainingRequests: -1, RemainingTokens: -1}},
		{"retry-after seconds", 429, map[string]string{"retry-after": "20"},
			Outcome{Status: 429, RetryAfter: 20 * time.Second, RemainingRequests: -1, RemainingTokens: -1}},
		{"retry-after-ms wins", 429, map[string]string{"retry-after": "1", "retry-after-ms": "250"},
			Outcome{Status: 429, RetryAfter: 250 * time.Millisecond, RemainingRequests: -1, RemainingTokens: -1}},
		{"openai rate-limit headers", 200, map[string]string{
			"x-ratelimit-remaining-requests": "0", "x-ratelimit-remaining-tokens": "149984",
			"x-ratelimit-reset-requests": "6m0s", "x-ratelimit-reset-tokens": "20ms"},
			Outcome{Status: 200, RemainingRequests: 0, RemainingTokens: 149984, ResetRequests: 6 * time.Minute, ResetTokens: 20 * time.Millisecond}},
		{"reset as seconds and compound", 200, map[string]string{"x-ratelimit-reset-requests": "1.5", "x-ratelimit-reset-tokens": "1h2m3.5s"},
			Outcome{Status: 200, RemainingRequests: -1, RemainingTokens: -1, ResetRequests: 1500 * time.Millisecond, ResetTokens: time.Hour + 2*time.Minute + 3500*time.Millisecond}},
		{"openai limits", 200, map[string]string{"x-ratelimit-limit-requests": "500", "x-ratelimit-limit-tokens": "30000"},
			Outcome{Status: 200, RemainingRequests: -1, RemainingTokens: -1, LimitRequests: 500, LimitTokens: 30000}},
		{"anthropic limits", 200, map[string]string{"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-tokens-limit": "40000"},
			Outcome{Status: 200, RemainingRequests: -1, RemainingTokens: -1, LimitRequests: 50, LimitTokens: 40000}},
		{"garbage ignored", 200, map[string]string{"retry-after": "soon", "x-ratelimit-remaining-requests": "-3", "x-ratelimit-reset-tokens": "later"},
			Outcome{Status: 200, RemainingRequests: -1, RemainingTokens: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseOutcome(tc.status, func(n string) string { return tc.headers[n] })
			if got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	reset := now.Add(20 * time.Second).UTC().Format(time.RFC3339)
	a := ParseOutcome(200, func(n string) string {
		return map[string]string{"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": reset,
			"anthropic-ratelimit-tokens-remaining": "5000"}[n]
	})
	if a.RemainingRequests != 0 || a.RemainingTokens != 5000 || a.ResetRequests < 18*time.Second || a.ResetRequests > 20*time.Second {
		t.Fatalf("anthropic headers: %+v", a)
	}
	date := now.Add(30 * time.Second).UTC().Format(http1123)
	if d := parseRetryAfter(date, now); d < 28*time.Second || d > 30*time.Second {
		t.Fatalf("HTTP-date Retry-After: %s", d)
	}
}

const http1123 = "Mon, 02 Jan 2006 15:04:05 GMT"
