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
	if ok || ra <= edsSettle || ra > cooldown+edsSettle {
		t.Fatalf("Available(primary) = %v, %s; want false, ≤ %s and the EDS settle", ok, ra, cooldown)
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
		at      time.Duration
		raw     bool
		want    bool
		resting bool // every key waits for the provider's reset
	}
	rest := func(at time.Duration) step { return step{at: at, resting: true} }
	tests := []struct {
		name  string
		steps []step
	}{
		{"the first downs come back at once", []step{
			{0, true, true, false}, {time.Second, false, false, false}, {1500 * time.Millisecond, true, true, false},
			{2 * time.Second, false, false, false}, {2100 * time.Millisecond, true, true, false},
		}},
		{"from the third down in the window, held; each further down doubles", []step{
			{0, false, false, false}, {time.Second, true, true, false},
			{2 * time.Second, false, false, false}, {3 * time.Second, true, true, false},
			{4 * time.Second, false, false, false}, {4500 * time.Millisecond, true, false, false}, {5 * time.Second, true, true, false}, // hold 1s
			{6 * time.Second, false, false, false}, {7 * time.Second, true, false, false}, {8 * time.Second, true, true, false}, // hold 2s
			{9 * time.Second, false, false, false}, {12 * time.Second, true, false, false}, {13 * time.Second, true, true, false}, // hold 4s
		}},
		{"the hold is capped", []step{
			{0, false, false, false}, {1 * time.Second, true, true, false},
			{2 * time.Second, false, false, false}, {3 * time.Second, true, true, false},
			{4 * time.Second, false, false, false}, {5 * time.Second, true, true, false}, // 1s
			{6 * time.Second, false, false, false}, {8 * time.Second, true, true, false}, // 2s
			{9 * time.Second, false, false, false}, {13 * time.Second, true, true, false}, // 4s
			{14 * time.Second, false, false, false}, {22 * time.Second, true, true, false}, // 8s
			{23 * time.Second, false, false, false}, {30 * time.Second, true, false, false}, {31 * time.Second, true, true, false}, // 8s, not 16s
		}},
		{"downs older than the window are forgotten", []step{
			{0, false, false, false}, {time.Second, true, true, false}, {2 * time.Second, false, false, false}, {3 * time.Second, true, true, false},
			{2 * time.Minute, false, false, false}, {2*time.Minute + 100*time.Millisecond, true, true, false},
		}},
		{"still unhealthy after the hold stays down", []step{
			{0, false, false, false}, {1, true, true, false}, {2, false, false, false}, {3, true, true, false},
			{4, false, false, false}, {5 * time.Second, false, false, false}, {6 * time.Second, true, true, false},
		}},
		{"downs resting on the provider's limit are neither counted nor held", []step{
			rest(0), {300 * time.Millisecond, true, true, false},
			rest(time.Second), {time.Second + 200*time.Millisecond, true, true, false},
			rest(2 * time.Second), {2*time.Second + 100*time.Millisecond, true, true, false},
			rest(3 * time.Second), {3*time.Second + 1, true, true, false},
			rest(4 * time.Second), {4*time.Second + 1, true, true, false},
			// The first failure down is still a free one.
			{5 * time.Second, false, false, false}, {5*time.Second + 1, true, true, false},
		}},
		{"a resting down between failure downs does not double the hold", []step{
			{0, false, false, false}, {time.Second, true, true, false},
			{2 * time.Second, false, false, false}, {3 * time.Second, true, true, false},
			rest(4 * time.Second), {4*time.Second + 1, true, true, false},
			{5 * time.Second, false, false, false}, {5500 * time.Millisecond, true, false, false}, {6 * time.Second, true, true, false}, // 1s, not 2s
		}},
		{"a flapping backend resting on the limit comes back at the reset, not after the hold", []step{
			{0, false, false, false}, {time.Second, true, true, false},
			{2 * time.Second, false, false, false}, {3 * time.Second, true, true, false},
			{4 * time.Second, false, false, false}, {5 * time.Second, true, true, false}, // held 1s
			rest(6 * time.Second), rest(6500 * time.Millisecond), {7 * time.Second, true, true, false},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var d healthDamper
			for i, s := range tc.steps {
				if got := d.report(t0.Add(s.at), s.raw, s.resting && !s.raw, &p); got != s.want {
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

// What makes a down "resting" (not a flap, not held): every key open on the
// provider's limit. One key failed, or one key still usable, is not.
func TestRestingTellsLimitFromFailure(t *testing.T) {
	limit := Outcome{Status: 429, RetryAfter: 800 * time.Millisecond, RemainingRequests: -1, RemainingTokens: -1}
	spent := Outcome{Status: 200, RemainingRequests: 0, RemainingTokens: -1, ResetRequests: 600 * time.Millisecond}
	tests := []struct {
		name     string
		outcomes map[string][]Outcome // per key
		want     bool
	}{
		{"every key on quota (Retry-After, remaining 0)", map[string][]Outcome{"k1": {limit}, "k2": {spent}}, true},
		{"every key tripped by 429s", map[string][]Outcome{"k1": {status(429), status(429), status(429)}, "k2": {limit}}, true},
		{"one key tripped by 5xx", map[string][]Outcome{"k1": {limit}, "k2": {status(500), status(500)}}, false},
		{"one key refused credentials", map[string][]Outcome{"k1": {limit}, "k2": {status(401)}}, false},
		{"one key still usable", map[string][]Outcome{"k1": {limit}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, breakerYAML(10*time.Second, time.Minute, time.Second, 0, true),
				map[string][]key{"b": {{id: "k1"}, {id: "k2"}}})
			clk := newFakeClock()
			p := newPools(t, cfg, Options{Clock: clk})
			for id, os := range tc.outcomes {
				for _, o := range os {
					_ = p.Report(t.Context(), "b", id, "", o)
				}
			}
			kp := p.pool("b")
			kp.mu.Lock()
			got := kp.restingLocked(clk.Now())
			kp.mu.Unlock()
			if got != tc.want {
				t.Fatalf("resting = %v, want %v", got, tc.want)
			}
		})
	}
}

// A single-relay pool whose keys all run out every one-second window: each
// down is resting, so the backend is never held past its keys' reset.
func TestHealthFollowsTheProviderReset(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(t, "breaker: {consecutive_429: 3, consecutive_5xx: 3, cooldown: 1s, max_cooldown: 5s, sync_interval: 1s, jitter: 0, honour_remaining: true, health_hold: 1s, health_flap_window: 2m}\n",
		map[string][]key{"b": {{id: "k1"}, {id: "k2"}}})
	p := newPools(t, cfg, Options{Clock: clk})
	spent := Outcome{Status: 200, RemainingRequests: 0, RemainingTokens: -1, ResetRequests: 700 * time.Millisecond}
	for i := range 10 {
		_ = p.Report(t.Context(), "b", "k1", "", spent)
		_ = p.Report(t.Context(), "b", "k2", "", spent)
		if p.BackendHealth()["b"] {
			t.Fatalf("window %d: every key spent, still healthy", i)
		}
		clk.Advance(700 * time.Millisecond)
		if !p.BackendHealth()["b"] {
			t.Fatalf("window %d: the keys reset, the backend is still held down", i)
		}
		clk.Advance(300 * time.Millisecond)
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
	if ok, ra := p.Available([]string{"b"}); ok || ra != 10*time.Second+edsSettle {
		t.Fatalf("held-down backend: Available = %v, %s; want false, the hold's 10s left and the EDS settle", ok, ra)
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
