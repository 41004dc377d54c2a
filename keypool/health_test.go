package keypool

import (
	"context"
	"testing"
	"time"
)

func waitChange(t *testing.T, p *Pools, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-p.Changes():
		return time.Since(start)
	case <-time.After(d):
		t.Fatalf("no Changes signal within %s", d)
		return 0
	}
}

func TestFailoverLoop(t *testing.T) {
	// The whole loop in real time with a short cooldown: all keys of
	// "primary" open -> unhealthy + Changes; at the end of the cooldown
	// healthy again (half-open) so EDS lets the probe flow; probe success
	// closes.
	const cooldown = 300 * time.Millisecond
	cfg := testConfig(t, breakerYAML(cooldown, 10*cooldown, time.Second, 0, false),
		map[string][]key{"primary": {{id: "p1"}, {id: "p2"}}, "fallback": {{id: "f1"}}})
	p := newPools(t, cfg, Options{})
	run(t, p)
	select { // initial health from New
	case <-p.Changes():
	case <-time.After(time.Second):
	}
	if h := p.BackendHealth(); !h["primary"] || !h["fallback"] {
		t.Fatalf("initial health %v", h)
	}
	tripped := time.Now() // the soonest open period starts with p1's trip
	for _, k := range []string{"p1", "p2"} {
		for range 3 {
			_ = p.Report(t.Context(), "primary", k, "", status(429))
		}
	}
	lag := waitChange(t, p, time.Second)
	if h := p.BackendHealth(); h["primary"] || !h["fallback"] {
		t.Fatalf("health after all keys of primary open: %v", h)
	}
	t.Logf("Changes fired %s after the trips", lag)
	if ok, _ := p.Available([]string{"primary", "fallback"}); !ok {
		t.Fatal("pool with a healthy fallback reported unavailable")
	}
	ok, ra := p.Available([]string{"primary"})
	if ok || ra <= 0 || ra > cooldown {
		t.Fatalf("Available(primary) = %v, %s; want false, ≤ %s", ok, ra, cooldown)
	}
	if _, err := p.Pick(t.Context(), "primary", PickRequest{Attempt: 1}); err == nil {
		t.Fatal("pick on an all-open backend succeeded")
	}

	// Recovery without any traffic: the cooldown ends, Run flips health.
	waitChange(t, p, 2*cooldown)
	flip := time.Since(tripped)
	if h := p.BackendHealth(); !h["primary"] {
		t.Fatalf("health after cooldown: %v", h)
	}
	if flip < cooldown || flip > cooldown+250*time.Millisecond {
		t.Fatalf("healthy again %s after the trip, cooldown %s", flip, cooldown)
	}
	t.Logf("healthy again (half-open) %s after the trip (cooldown %s)", flip, cooldown)
	l := pick(t, p, "primary", PickRequest{Attempt: 1})
	if !l.Probe {
		t.Fatal("first pick after cooldown is not a probe")
	}
	l.Done(status(200))
	if s := stateOf(t, p, l.KeyID); s.State != "closed" {
		t.Fatalf("probed key: %s", s.State)
	}
}

func TestChangesCoalesces(t *testing.T) {
	cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, time.Second, 0, false), map[string][]key{"b": {{id: "a"}}, "c": {{id: "x"}}})
	p := newPools(t, cfg, Options{Clock: newFakeClock()})
	// Nobody reads Changes: many flips must not block the data path.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 100 {
			for range 2 {
				_ = p.Report(context.Background(), "b", "a", "", status(500))
			}
			p.SetConfig(cfg) // keeps state
			_ = i
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("reports blocked on an unread Changes channel")
	}
	n := 0
	for {
		select {
		case <-p.Changes():
			n++
			continue
		default:
		}
		break
	}
	if n != 1 {
		t.Fatalf("%d pending signals, want 1 (coalesced)", n)
	}
}
