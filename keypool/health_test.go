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

func TestHealthDampingTable(t *testing.T) {
	p := healthPolicy{hold: time.Second, maxHold: 8 * time.Second, window: time.Minute}
	t0 := time.Unix(1000, 0)
	type step struct {
		at   time.Duration
		raw  bool
		want bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"the first downs come back at once", []step{
			{0, true, true}, {time.Second, false, false}, {1500 * time.Millisecond, true, true},
			{2 * time.Second, false, false}, {2100 * time.Millisecond, true, true},
		}},
		{"from the third down in the window, held; each further down doubles", []step{
			{0, false, false}, {time.Second, true, true},
			{2 * time.Second, false, false}, {3 * time.Second, true, true},
			{4 * time.Second, false, false}, {4500 * time.Millisecond, true, false}, {5 * time.Second, true, true}, // hold 1s
			{6 * time.Second, false, false}, {7 * time.Second, true, false}, {8 * time.Second, true, true}, // hold 2s
			{9 * time.Second, false, false}, {12 * time.Second, true, false}, {13 * time.Second, true, true}, // hold 4s
		}},
		{"the hold is capped", []step{
			{0, false, false}, {1 * time.Second, true, true},
			{2 * time.Second, false, false}, {3 * time.Second, true, true},
			{4 * time.Second, false, false}, {5 * time.Second, true, true}, // 1s
			{6 * time.Second, false, false}, {8 * time.Second, true, true}, // 2s
			{9 * time.Second, false, false}, {13 * time.Second, true, true}, // 4s
			{14 * time.Second, false, false}, {22 * time.Second, true, true}, // 8s
			{23 * time.Second, false, false}, {30 * time.Second, true, false}, {31 * time.Second, true, true}, // 8s, not 16s
		}},
		{"downs older than the window are forgotten", []step{
			{0, false, false}, {time.Second, true, true}, {2 * time.Second, false, false}, {3 * time.Second, true, true},
			{2 * time.Minute, false, false}, {2*time.Minute + 100*time.Millisecond, true, true},
		}},
		{"still unhealthy after the hold stays down", []step{
			{0, false, false}, {1, true, true}, {2, false, false}, {3, true, true},
			{4, false, false}, {5 * time.Second, false, false}, {6 * time.Second, true, true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var d healthDamper
			for i, s := range tc.steps {
				if got := d.report(t0.Add(s.at), s.raw, &p); got != s.want {
					t.Fatalf("step %d (+%s raw %v): reported %v, want %v", i, s.at, s.raw, got, s.want)
				}
			}
		})
	}
}

func TestHealthDampingFlakyKey(t *testing.T) {
	// A one-key backend whose key trips, half-opens, recovers and trips
	// again every cooldown: without the hold, every cooldown is two EDS
	// pushes; with it, the pushes thin out as the hold doubles.
	const cooldown = time.Second
	clk := newFakeClock()
	cfg := testConfig(t, "breaker: {consecutive_429: 1, consecutive_5xx: 1, cooldown: 1s, max_cooldown: 30s, sync_interval: 1s, jitter: 0, health_hold: 1s, health_flap_window: 2m}\n",
		map[string][]key{"flaky": {{id: "k"}}})
	p := newPools(t, cfg, Options{Clock: clk})
	flips, last := 0, true
	for range 44 { // 44 s, one trip and one recovery per second
		_ = p.Report(t.Context(), "flaky", "k", "", status(500))
		if h := p.BackendHealth()["flaky"]; h != last {
			flips, last = flips+1, h
		}
		clk.Advance(cooldown)
		if l, err := p.Pick(t.Context(), "flaky", PickRequest{Attempt: 1}); err == nil {
			l.Done(status(200))
		}
		if h := p.BackendHealth()["flaky"]; h != last {
			flips, last = flips+1, h
		}
	}
	// Undamped this is 88 flips; two free downs, then the doubling hold
	// (1, 2, 4, 8, 16 s) leaves about fifteen.
	if flips > 16 {
		t.Fatalf("%d health flips in 44 s", flips)
	}
	t.Logf("%d health flips in 44 s of a key failing every second", flips)
}

func TestFailingTellsFailureFromCapacity(t *testing.T) {
	cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, time.Second, 0, false),
		map[string][]key{"a": {{id: "a1"}, {id: "a2"}}, "b": {{id: "b1"}}})
	p := newPools(t, cfg, Options{Clock: newFakeClock()})
	trip := func(backend, id string, st int, n int) {
		for range n {
			_ = p.Report(t.Context(), backend, id, "", status(st))
		}
	}
	trip("a", "a1", 500, 2)
	if p.Failing([]string{"a"}) {
		t.Fatal("one key of two open: not failing")
	}
	trip("a", "a2", 429, 3)
	if p.Failing([]string{"a"}) {
		t.Fatal("a key open for 429s is busy, not failing")
	}
	trip("b", "b1", 401, 1)
	if !p.Failing([]string{"b"}) {
		t.Fatal("the only key refused by the provider: failing")
	}
	if p.Failing([]string{"a", "b"}) || p.Failing([]string{"unknown"}) {
		t.Fatal("failing needs every known backend failing")
	}
}

// Admission must agree with EDS: a backend the damper holds down gets no
// traffic from Envoy, so its keys do not make a request admissible.
func TestAvailableFollowsTheDampedHealth(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(t, "breaker: {consecutive_429: 1, consecutive_5xx: 1, cooldown: 1s, max_cooldown: 30s, sync_interval: 1s, jitter: 0, health_hold: 20s, health_flap_window: 2m}\n",
		map[string][]key{"b": {{id: "k"}}})
	p := newPools(t, cfg, Options{Clock: clk})
	for i := range freeFlips + 1 { // the third down is held
		_ = p.Report(t.Context(), "b", "k", "", status(500))
		p.BackendHealth()
		if i < freeFlips {
			clk.Advance(10 * time.Second) // the key half-opens; the backend is back
			if !p.BackendHealth()["b"] {
				t.Fatalf("down %d: not back after the open period", i+1)
			}
		}
	}
	clk.Advance(10 * time.Second) // the key half-opens, the backend is held
	if ok, ra := p.Available([]string{"b"}); ok || ra != 10*time.Second {
		t.Fatalf("held-down backend: Available = %v, %s; want false, the hold's 10s left", ok, ra)
	}
	clk.Advance(10 * time.Second)
	// Reported healthy again now; admission waits for the EDS push.
	if ok, ra := p.Available([]string{"b"}); ok || ra != edsSettle {
		t.Fatalf("just released: Available = %v, %s; want false until the push settles (%s)", ok, ra, edsSettle)
	}
	clk.Advance(edsSettle)
	if ok, _ := p.Available([]string{"b"}); !ok {
		t.Fatal("after the hold and the settle the half-open key is available again")
	}
}
