package keypool

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSetConfigKeepsBreakerState(t *testing.T) {
	extra := breakerYAML(time.Minute, time.Hour, time.Second, 0, false)
	p := newPools(t, testConfig(t, extra, map[string][]key{"b": {{id: "a"}, {id: "b"}}}), Options{Clock: newFakeClock()})
	for range 3 {
		_ = p.Report(t.Context(), "b", "a", "", status(429))
	}
	l := pick(t, p, "b", PickRequest{RequestID: "r", Attempt: 1})
	p.SetConfig(testConfig(t, extra, map[string][]key{"b": {{id: "a"}, {id: "c"}}, "new": {{id: "n"}}}))
	snap := map[string]KeyState{}
	for _, s := range p.Snapshot() {
		snap[s.KeyID] = s
	}
	if _, ok := snap["b"]; ok {
		t.Fatal("removed key still listed")
	}
	if snap["a"].State != "open" || snap["c"].State != "closed" || snap["n"].State != "closed" {
		t.Fatalf("after reload: %+v", snap)
	}
	l.Done(status(200)) // a lease of a removed key is harmless
	if got := pick(t, p, "b", PickRequest{Attempt: 1}); got.KeyID != "c" {
		t.Fatalf("picked %s", got.KeyID)
	}
	if _, err := p.Pick(t.Context(), "gone", PickRequest{}); !errors.Is(err, ErrNoKey) {
		t.Fatalf("unknown backend: %v", err)
	}
	if err := p.Report(t.Context(), "b", "b", "", status(200)); !errors.Is(err, ErrNoKey) {
		t.Fatalf("report for removed key: %v", err)
	}
}

// limiterFunc adapts a function to KeyLimiter.
type limiterFunc func(ctx context.Context, keyID string, tokens int) (bool, time.Duration, error)

func (f limiterFunc) Allow(ctx context.Context, keyID string, tokens int) (bool, time.Duration, error) {
	return f(ctx, keyID, tokens)
}

func TestSharedLimiter(t *testing.T) {
	clk := newFakeClock()
	var fail bool
	lim := limiterFunc(func(_ context.Context, keyID string, _ int) (bool, time.Duration, error) {
		if fail {
			return false, 0, errors.New("ratelimit service unreachable")
		}
		return keyID != "a", 2 * time.Second, nil
	})
	cfg := testConfig(t, "", map[string][]key{"b": {{id: "a", rpm: 1}, {id: "b", rpm: 1}}})
	p := newPools(t, cfg, Options{Clock: clk, Limiter: lim})
	for range 5 { // rpm 1 is the limiter's business now: b serves all
		l := pick(t, p, "b", PickRequest{Attempt: 1, EstTokens: 10})
		if l.KeyID != "b" {
			t.Fatalf("picked %s refused by the limiter", l.KeyID)
		}
		l.Done(status(200))
	}
	if s := stateOf(t, p, "a"); s.InFlight != 0 || s.Picks != 0 {
		t.Fatalf("refused pick not undone: %+v", s)
	}
	// Limiter down: the local windows (rpm 1 each, b already used 5 in
	// this minute) decide.
	fail = true
	clk.Advance(3 * time.Second)
	l := pick(t, p, "b", PickRequest{Attempt: 1})
	if l.KeyID != "a" {
		t.Fatalf("with limiter down picked %s, want a (b over its local rpm)", l.KeyID)
	}
	if _, err := p.Pick(t.Context(), "b", PickRequest{Attempt: 1}); !errors.Is(err, ErrNoKey) {
		t.Fatalf("local windows full: %v", err)
	}
}
