package keypool

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestShortRefusals: a key that refuses part of its requests with a short
// Retry-After while its window has room stays closed and is offered more
// attempts; the window's end (remaining 0), a long Retry-After or a key
// refusing nearly everything still hold it.
func TestShortRefusals(t *testing.T) {
	refuse := Outcome{Status: 429, RetryAfter: time.Second, RemainingRequests: 12, RemainingTokens: -1, LimitRequests: 20, ResetRequests: 10 * time.Second}
	served := Outcome{Status: 200, RemainingRequests: 11, RemainingTokens: -1, LimitRequests: 20, ResetRequests: 10 * time.Second}
	spent := Outcome{Status: 429, RetryAfter: time.Second, RemainingRequests: 0, RemainingTokens: -1, LimitRequests: 20, ResetRequests: 4 * time.Second}
	long := refuse
	long.RetryAfter = 30 * time.Second
	alternate := func(n int) []Outcome {
		var os []Outcome
		for i := range n {
			if i%2 == 0 {
				os = append(os, refuse)
			} else {
				os = append(os, served)
			}
		}
		return os
	}
	repeat := func(o Outcome, n int) []Outcome {
		var os []Outcome
		for range n {
			os = append(os, o)
		}
		return os
	}
	for _, tc := range []struct {
		name        string
		outcomes    []Outcome
		wantState   string
		factorBelow float64 // the pace interval's factor is below this
	}{
		{"half refused, never opened", append(repeat(refuse, 3), alternate(200)...), "closed", 0.6},
		{"window's end holds the key", []Outcome{spent}, "open", 1.01},
		{"a long Retry-After holds the key", []Outcome{long}, "open", 1.01},
		{"refusing everything trips the breaker", repeat(refuse, 60), "open", 0.26},
		{"no refusals, full pace", repeat(served, 5), "closed", 1.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, breakerYAML(10*time.Second, time.Minute, time.Second, 0, true),
				map[string][]key{"b": {{id: "k1"}, {id: "k2"}}})
			p := newPools(t, cfg, Options{Clock: newFakeClock()})
			for _, o := range tc.outcomes {
				_ = p.Report(t.Context(), "b", "k1", "", o)
			}
			if st := stateOf(t, p, "k1"); st.State != tc.wantState {
				t.Errorf("state %s (%s), want %s", st.State, st.Reason, tc.wantState)
			}
			kp := p.pool("b")
			kp.mu.Lock()
			f := kp.byID["k1"].attemptFactor()
			kp.mu.Unlock()
			if f >= tc.factorBelow {
				t.Errorf("attempt factor %.2f, want below %.2f", f, tc.factorBelow)
			}
		})
	}
}

// TestRetryShareLeavesRefusalsOut: retries after a short refusal take no
// window the pace must leave room for; other retries do.
func TestRetryShareLeavesRefusalsOut(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		picks, retries, refusals int
		want                     float64
	}{
		{picks: 100, retries: 20, want: 0.2},
		{picks: 100, retries: 20, refusals: 15, want: 0.05},
		{picks: 100, retries: 20, refusals: 30, want: 0},
		{picks: 10, retries: 5, want: 0},
		{picks: 100, retries: 90, want: 0.5},
	} {
		var m attemptMix
		m.counts(now) // first rotation
		for i := range tc.picks {
			attempt := 1
			if i < tc.retries {
				attempt = 2
			}
			m.add(attempt)
		}
		for range tc.refusals {
			m.refused()
		}
		if got := retryShare(m.counts(now)); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("%+v: share %.3f, want %.3f", tc, got, tc.want)
		}
	}
}

// TestInFlight429sMakeNoStreak: when a key's window fills under a swarm,
// the attempts already in flight all come back 429; they say nothing new,
// so after the rest the key's next 429 (an attempt that raced the one
// slot the sliding window freed) rests it again instead of tripping it
// for the cooldown. The key serves between its rests.
func TestInFlight429sMakeNoStreak(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(t, breakerYAML(30*time.Second, time.Minute, time.Second, 0, true), map[string][]key{"b": {{id: "k1"}}})
	p := newPools(t, cfg, Options{Clock: clk})
	full := Outcome{Status: 429, RetryAfter: 3 * time.Second, RemainingRequests: 0, RemainingTokens: -1, LimitRequests: 60, ResetRequests: 9 * time.Second}
	for round := range 6 {
		for range 8 { // the first holds the key, the other seven were in flight
			_ = p.Report(t.Context(), "b", "k1", "", full)
		}
		if st := stateOf(t, p, "k1"); st.State != "open" || st.Reason != "quota" || st.Trips != 0 {
			t.Fatalf("round %d: %+v, want held on quota, no trip", round, st)
		}
		clk.Advance(3 * time.Second)
		if round%2 == 1 {
			_ = p.Report(t.Context(), "b", "k1", "", Outcome{Status: 200, RemainingRequests: 3, RemainingTokens: -1, LimitRequests: 60})
		}
	}
}

// TestRetrySharePerBackendSet: Envoy's retries on one backend's keys slow
// the pace of the sets that include that backend only; another model's
// flaky keys do not take its admissions.
func TestRetrySharePerBackendSet(t *testing.T) {
	cfg := testConfig(t, "admission: {pace: false}\n", map[string][]key{"a": {{id: "a1", rpm: 60000}}, "b": {{id: "b1", rpm: 60000}}})
	p := newPools(t, cfg, Options{})
	served := ParseOutcome(200, func(string) string { return "" })
	for i := range 40 {
		attempt := 1
		if i%2 == 1 {
			attempt = 2 // every other pick on b is a retry
		}
		l, err := p.Pick(t.Context(), "b", PickRequest{RequestID: fmt.Sprint("r", i), Attempt: attempt})
		if err != nil {
			t.Fatalf("pick %d: %v", i, err)
		}
		l.Done(served)
	}
	full := admitShare * 60000 / 60.0
	for _, tc := range []struct {
		set  []string
		want float64
	}{
		{[]string{"a"}, full},              // no retries of its own
		{[]string{"b"}, full / 2},          // half its picks were retries (the share's cap)
		{[]string{"a", "b"}, 2 * full / 2}, // b's retries over both sets' picks
	} {
		if got, _ := p.Pace(tc.set); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("pace of %v = %.4f, want %.4f", tc.set, got, tc.want)
		}
	}
}

// TestRetryShareRefusalOnAnotherBackend: a short refusal on one backend's
// key retried on another backend of the same set takes no window from the
// set: the refusal counted on the first offsets the retry on the second.
func TestRetryShareRefusalOnAnotherBackend(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var a, b attemptMix
	a.counts(now)
	b.counts(now)
	for i := range 40 {
		b.add(1)
		if i%2 == 0 {
			b.refused() // half of b's attempts refused...
			a.add(2)    // ...and retried on a
		} else {
			a.add(1)
		}
	}
	pa, ra := a.counts(now)
	pb, rb := b.counts(now)
	if got := retryShare(pa+pb, ra+rb); got != 0 {
		t.Errorf("set {a, b}: retry share %.3f, want 0", got)
	}
	if got := retryShare(pa, ra); got != 0.5 {
		t.Errorf("set {a} alone: retry share %.3f, want 0.5 (the refusals were b's)", got)
	}
}

// TestShortRefusalOnProbe: a half-open key's probe answered by a short
// refusal (the provider's pace: neither recovered nor failed) frees the
// probe slot, so the next pick probes again at once; before, the key kept
// its probe out for probeTTL (two minutes by default) and strict picks
// failed meanwhile. Other answers still decide the probe.
func TestShortRefusalOnProbe(t *testing.T) {
	refuse := Outcome{Status: 429, RetryAfter: time.Second, RemainingRequests: 12, RemainingTokens: -1}
	for _, tc := range []struct {
		name      string
		answer    Outcome
		viaLease  bool   // Lease.Done rather than Report
		wantState string // after the answer
		wantProbe bool   // the next strict pick gets the key as its probe
	}{
		{name: "short refusal, reported", answer: refuse, wantState: "half-open", wantProbe: true},
		{name: "short refusal, lease done", answer: refuse, viaLease: true, wantState: "half-open", wantProbe: true},
		{name: "success closes", answer: status(200), wantState: "closed"},
		{name: "5xx reopens", answer: status(503), wantState: "open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := testConfig(t, breakerYAML(time.Second, time.Minute, time.Second, 0, false), map[string][]key{"b": {{id: "k1"}}})
			p := newPools(t, cfg, Options{Clock: clk})
			_ = p.Report(t.Context(), "b", "k1", "", status(500))
			_ = p.Report(t.Context(), "b", "k1", "", status(500))
			clk.Advance(2 * time.Second)
			l := pick(t, p, "b", PickRequest{RequestID: "r1", Attempt: 1})
			if !l.Probe {
				t.Fatal("first pick at half-open is not the probe")
			}
			if tc.viaLease {
				l.Done(tc.answer)
			} else {
				_ = p.Report(t.Context(), "b", "k1", "r1", tc.answer)
			}
			if st := stateOf(t, p, "k1"); st.State != tc.wantState || st.InFlight != 0 {
				t.Fatalf("after the probe's answer: %+v, want %s, nothing in flight", st, tc.wantState)
			}
			l, err := p.Pick(t.Context(), "b", PickRequest{RequestID: "r2", Attempt: 1})
			switch {
			case tc.wantState == "open":
				if err == nil {
					t.Fatalf("reopened key picked: %+v", l)
				}
			case err != nil:
				t.Fatalf("next pick: %v (probe slot still taken?)", err)
			case l.Probe != tc.wantProbe:
				t.Fatalf("next pick probe %v, want %v", l.Probe, tc.wantProbe)
			}
		})
	}
}
