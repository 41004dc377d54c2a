package keypool

import (
	"cmp"
	"context"
	"errors"
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
		sentAgo  time.Duration // the key's first attempt, before now (0: not known)
		want     bool
	}{
		{name: "cold: one in flight", inFlight: 1},
		{name: "cold: at the bound", inFlight: coldStartInFlight, want: true},
		{name: "cold: at the bound, first sent just now", sentAgo: coldStartMax - time.Millisecond, inFlight: coldStartInFlight, want: true},
		{name: "cold: no answer within coldStartMax", sentAgo: coldStartMax, inFlight: coldStartInFlight},
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
			if tc.sentAgo > 0 {
				k.firstSent = now.Add(-tc.sentAgo)
			}
			for _, o := range tc.answers {
				k.noteRemaining(o, now)
			}
			if got := k.overRemaining(now.Add(tc.at), 2); got != tc.want {
				t.Errorf("held %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPickWaitsForHeldKey: with the pace on, an attempt that finds every
// key held by its cold start (two attempts in flight before the first
// answer) waits for that answer instead of being refused, within the
// pick's wait bound (here message_timeout / 2 = 200 ms); with no answer
// in that bound it is refused, saying when to retry.
func TestPickWaitsForHeldKey(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answerIn time.Duration // when the first attempt is answered (0: never)
		wantKey  bool
	}{
		{name: "answered within the bound", answerIn: 80 * time.Millisecond, wantKey: true},
		{name: "no answer within the bound", wantKey: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPools(t, testConfig(t, paceYAML+"request: {message_timeout: 400ms}\n", map[string][]key{"b": {{id: "a"}}}), Options{})
			first := pick(t, p, "b", PickRequest{Attempt: 1})
			second := pick(t, p, "b", PickRequest{Attempt: 1})
			defer second.Done(status(200))
			if tc.answerIn > 0 {
				time.AfterFunc(tc.answerIn, func() { first.Done(status(200)) })
			} else {
				defer first.Done(status(200))
			}
			l, err := p.Pick(context.Background(), "b", PickRequest{Attempt: 1})
			if !tc.wantKey {
				var ex *ExhaustedError
				if !errors.As(err, &ex) || ex.RetryAfter <= 0 {
					t.Fatalf("pick: %v, want an *ExhaustedError with a Retry-After", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("pick: %v, want key a once the first attempt is answered", err)
			}
			l.Done(status(200))
		})
	}
}

// TestOverRemainingWindowPending: while a key's window is not known yet
// (its limit is its reset window's own, no pace), a replica holds it to a
// quarter of what its provider last said remains; once the window is
// learned, to half.
func TestOverRemainingWindowPending(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name     string
		window   time.Duration // learned window (0: pending)
		replicas int           // 0: 2
		inFlight int
		want     bool
	}{
		{name: "pending: 4 of 19", inFlight: 4},
		{name: "pending: 5 of 19", inFlight: 5, want: true},
		{name: "learned: 9 of 19", window: 10 * time.Second, inFlight: 9},
		{name: "learned: 10 of 19", window: 10 * time.Second, inFlight: 10, want: true},
		// Three replicas pick the key: a third each, a sixth while pending.
		{name: "3 replicas, pending: 3 of 19", replicas: 3, inFlight: 3},
		{name: "3 replicas, pending: 4 of 19", replicas: 3, inFlight: 4, want: true},
		{name: "3 replicas, learned: 6 of 19", replicas: 3, window: 10 * time.Second, inFlight: 6},
		{name: "3 replicas, learned: 7 of 19", replicas: 3, window: 10 * time.Second, inFlight: 7, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &keyState{inFlight: tc.inFlight, learnedRPM: 20, ownWindow: true, resetSeen: true, learnedWindow: tc.window}
			k.noteRemaining(Outcome{Status: 200, LimitRequests: 20, RemainingRequests: 19, RemainingTokens: -1, ResetRequests: 10 * time.Second}, now)
			if got := k.overRemaining(now, cmp.Or(tc.replicas, 2)); got != tc.want {
				t.Errorf("held %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDrainedBy: only a key whose provider said none remains (or whose
// breaker it opened for quota) is drained, until the moment it named; a
// key that never said so (a cold one held by its first attempts) is not,
// so a pick booking a paced slot does not pass its hold.
func TestDrainedBy(t *testing.T) {
	now := time.Unix(1000, 0)
	drained := Outcome{Status: 200, RemainingRequests: 0, RemainingTokens: -1, ResetRequests: time.Second}
	for _, tc := range []struct {
		name   string
		answer *Outcome
		quota  time.Duration // breaker open for quota this long
		at     time.Duration // asked about now+at (-1: the zero time)
		want   bool
	}{
		{name: "cold key", at: time.Hour},
		{name: "cold key, zero time", at: -1},
		{name: "none left: before the reset", answer: &drained, at: 999 * time.Millisecond},
		{name: "none left: at the reset", answer: &drained, at: time.Second, want: true},
		{name: "none left: zero time", answer: &drained, at: -1},
		{name: "some left", answer: &Outcome{Status: 200, RemainingRequests: 3, RemainingTokens: -1, ResetRequests: time.Second}, at: time.Hour},
		{name: "quota breaker: before it ends", quota: 2 * time.Second, at: time.Second},
		{name: "quota breaker: when it ends", quota: 2 * time.Second, at: 2 * time.Second, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &keyState{inFlight: coldStartInFlight}
			if tc.answer != nil {
				k.noteRemaining(*tc.answer, now)
			}
			if tc.quota > 0 {
				k.br.quota(now, now.Add(tc.quota))
			}
			at := now.Add(tc.at)
			if tc.at < 0 {
				at = time.Time{}
			}
			if got := k.drainedBy(at); got != tc.want {
				t.Errorf("drainedBy = %v, want %v", got, tc.want)
			}
		})
	}
}
