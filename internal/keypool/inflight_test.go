package keypool

import (
	"testing"
	"time"
)

// TestOverRemaining: with the pace on, a key has at most coldStartInFlight
// attempts in flight until its first answer, then at most half of what its
// provider last said remains, until that statement's reset.
func TestOverRemaining(t *testing.T) {
	now := time.Unix(1000, 0)
	ok := func(remaining int, reset time.Duration) Outcome {
		return Outcome{Status: 200, LimitRequests: 60, RemainingRequests: remaining, RemainingTokens: -1, ResetRequests: reset}
	}
	for _, tc := range []struct {
		name     string
		answers  []Outcome
		inFlight int
		at       time.Duration // after the answers
		want     bool
	}{
		{name: "cold: one in flight", inFlight: 1},
		{name: "cold: at the bound", inFlight: coldStartInFlight, want: true},
		{name: "59 left: 29 in flight", answers: []Outcome{ok(59, 10*time.Second)}, inFlight: 29},
		{name: "59 left: 30 in flight", answers: []Outcome{ok(59, 10*time.Second)}, inFlight: 30, want: true},
		{name: "1 left: one in flight", answers: []Outcome{ok(1, 10*time.Second)}, inFlight: 1, want: true},
		{name: "after the reset: not held", answers: []Outcome{ok(1, time.Second)}, inFlight: 5, at: 2 * time.Second},
		{name: "no statement: not held", answers: []Outcome{{Status: 200, RemainingRequests: -1, RemainingTokens: -1}}, inFlight: 50},
		{name: "a refusal states what remains, until its Retry-After", answers: []Outcome{ok(40, 10*time.Second), {Status: 429, RemainingRequests: 0, RemainingTokens: -1, RetryAfter: time.Second}},
			inFlight: 0, want: true},
		{name: "after the refusal's Retry-After: not held", answers: []Outcome{ok(40, 10*time.Second), {Status: 429, RemainingRequests: 0, RemainingTokens: -1, RetryAfter: time.Second}},
			inFlight: 3, at: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &keyState{inFlight: tc.inFlight}
			for _, o := range tc.answers {
				k.noteRemaining(o, now)
			}
			if got := k.overRemaining(now.Add(tc.at)); got != tc.want {
				t.Errorf("held %v, want %v", got, tc.want)
			}
		})
	}
}
