package keypool

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

func TestSWRRSequence(t *testing.T) {
	cfg := testConfig(t, "", map[string][]key{"b": {{id: "a", weight: 5}, {id: "b", weight: 1}, {id: "c", weight: 1}}})
	p := newPools(t, cfg, Options{Clock: newFakeClock()})
	var got []string
	for range 14 {
		l := pick(t, p, "b", PickRequest{Attempt: 1})
		got = append(got, l.KeyID)
		l.Done(status(200))
	}
	want := "a a b a c a a a a b a c a a" // nginx's sequence, twice
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("sequence\n got %s\nwant %s", g, want)
	}
}

func TestSWRRSkipsOpenKeys(t *testing.T) {
	cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, time.Second, 0, false),
		map[string][]key{"b": {{id: "a", weight: 5}, {id: "b", weight: 1}, {id: "c", weight: 1}}})
	p := newPools(t, cfg, Options{Clock: newFakeClock()})
	for range 2 { // consecutive_5xx: 2
		if err := p.Report(t.Context(), "b", "b", "", status(503)); err != nil {
			t.Fatal(err)
		}
	}
	if s := stateOf(t, p, "b"); s.State != "open" {
		t.Fatalf("b not open: %+v", s)
	}
	n := map[string]int{}
	for range 60 {
		l := pick(t, p, "b", PickRequest{Attempt: 1})
		n[l.KeyID]++
		l.Done(status(200))
	}
	if n["b"] != 0 || n["a"] != 50 || n["c"] != 10 {
		t.Fatalf("distribution with b open: %v, want a:50 c:10", n)
	}
}

func TestPicksReachingRateLimitedKey(t *testing.T) {
	// Key a answers 429 to everything; b is fine. At most
	// consecutive_429 + in-flight picks may still reach a.
	const inFlight = 4
	cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, time.Second, 0, false),
		map[string][]key{"b": {{id: "a"}, {id: "b"}}})
	p := newPools(t, cfg, Options{Clock: newFakeClock()})
	var window []Lease
	toA := 0
	for range 200 {
		l := pick(t, p, "b", PickRequest{Attempt: 1})
		if l.KeyID == "a" {
			toA++
		}
		window = append(window, l)
		if len(window) == inFlight {
			old := window[0]
			window = window[1:]
			if old.KeyID == "a" {
				old.Done(status(429))
			} else {
				old.Done(status(200))
			}
		}
	}
	if toA > 3+inFlight {
		t.Fatalf("%d picks reached the rate-limited key, want ≤ %d", toA, 3+inFlight)
	}
	if s := stateOf(t, p, "a"); s.State != "open" || s.Reason != "429" {
		t.Fatalf("a: %+v", s)
	}
	t.Logf("picks reaching a: %d (threshold 3, in flight %d)", toA, inFlight)
}

func TestHalfOpenProbeRecovers(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(t, breakerYAML(10*time.Second, time.Minute, time.Second, 0, false),
		map[string][]key{"b": {{id: "a"}, {id: "b"}}})
	p := newPools(t, cfg, Options{Clock: clk})
	for range 3 {
		_ = p.Report(t.Context(), "b", "a", "", status(429))
	}
	open := stateOf(t, p, "a")
	if open.State != "open" || open.OpenUntil.Sub(clk.Now()) != 10*time.Second {
		t.Fatalf("after 3×429: %+v", open)
	}
	for range 10 {
		if l := pick(t, p, "b", PickRequest{Attempt: 1}); l.KeyID != "b" {
			t.Fatal("open key picked")
		} else {
			l.Done(status(200))
		}
	}
	clk.Advance(10 * time.Second)
	if s := stateOf(t, p, "a"); s.State != "half-open" {
		t.Fatalf("after cooldown: %s", s.State)
	}
	var probe Lease
	for probe.KeyID != "a" {
		l := pick(t, p, "b", PickRequest{Attempt: 1})
		if l.KeyID == "a" {
			probe = l
		} else {
			l.Done(status(200))
		}
	}
	if !probe.Probe {
		t.Fatal("first pick of a half-open key is not marked as probe")
	}
	for range 10 { // probe outstanding: nobody else gets a
		l := pick(t, p, "b", PickRequest{Attempt: 1})
		if l.KeyID == "a" {
			t.Fatal("second request on a half-open key while its probe is out")
		}
		l.Done(status(200))
	}
	probe.Done(status(200))
	if s := stateOf(t, p, "a"); s.State != "closed" {
		t.Fatalf("after probe success: %s", s.State)
	}
	n := 0
	for range 10 {
		l := pick(t, p, "b", PickRequest{Attempt: 1})
		if l.KeyID == "a" {
			n++
		}
		l.Done(status(200))
	}
	if n != 5 {
		t.Fatalf("traffic back on a: %d of 10, want 5", n)
	}
}

func TestProbeFailureDoublesCooldown(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(t, breakerYAML(10*time.Second, 35*time.Second, time.Second, 0, false), map[string][]key{"b": {{id: "a"}}})
	p := newPools(t, cfg, Options{Clock: clk})
	for range 2 {
		_ = p.Report(t.Context(), "b", "a", "", status(500))
	}
	for _, want := range []time.Duration{20 * time.Second, 35 * time.Second, 35 * time.Second} {
		clk.Advance(stateOf(t, p, "a").OpenUntil.Sub(clk.Now()))
		l := pick(t, p, "b", PickRequest{Attempt: 1})
		if !l.Probe {
			t.Fatal("not a probe")
		}
		l.Done(Outcome{Reset: true})
		if got := stateOf(t, p, "a").OpenUntil.Sub(clk.Now()); got != want {
			t.Fatalf("open for %s after failed probe, want %s", got, want)
		}
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(t, breakerYAML(10*time.Second, time.Minute, time.Second, 0, false), map[string][]key{"b": {{id: "a"}, {id: "b"}}})
	p := newPools(t, cfg, Options{Clock: clk})
	// One 429 with Retry-After: the key rests that long without waiting
	// for the threshold.
	o := ParseOutcome(429, func(h string) string {
		if h == "retry-after" {
			return "7"
		}
		return ""
	})
	_ = p.Report(t.Context(), "b", "a", "", o)
	s := stateOf(t, p, "a")
	if s.State != "open" || s.Reason != "quota" || s.OpenUntil.Sub(clk.Now()) != 7*time.Second {
		t.Fatalf("after one 429 Retry-After 7: %+v", s)
	}
	clk.Advance(7 * time.Second)
	if s := stateOf(t, p, "a"); s.State != "closed" {
		t.Fatalf("quota period over: %s", s.State)
	}
	// The key keeps answering 429 after each rest: the third in a row
	// trips the breaker, open for max(Retry-After, cooldown).
	o.RetryAfter = 45 * time.Second
	_ = p.Report(t.Context(), "b", "a", "", o)
	clk.Advance(45 * time.Second)
	_ = p.Report(t.Context(), "b", "a", "", o)
	if s := stateOf(t, p, "a"); s.Reason != "429" || s.Trips != 1 || s.OpenUntil.Sub(clk.Now()) != 45*time.Second {
		t.Fatalf("third 429 in a row, Retry-After 45s: %+v", s)
	}
	o.RetryAfter = 0
	clk.Advance(45 * time.Second)
	_ = p.Report(t.Context(), "b", "a", "", o) // probe fails, no Retry-After: cooldown·2
	if s := stateOf(t, p, "a"); s.Trips != 2 || s.OpenUntil.Sub(clk.Now()) != 20*time.Second {
		t.Fatalf("failed probe: %+v", s)
	}
}

func TestRemainingHeadersStopBefore429(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(t, breakerYAML(10*time.Second, time.Minute, time.Second, 0, true), map[string][]key{"b": {{id: "a"}, {id: "b"}}})
	p := newPools(t, cfg, Options{Clock: clk})
	h := map[string]string{"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s", "x-ratelimit-remaining-tokens": "1000"}
	l := pick(t, p, "b", PickRequest{Attempt: 1})
	if l.KeyID != "a" {
		t.Fatalf("first pick %s", l.KeyID)
	}
	l.Done(ParseOutcome(200, func(n string) string { return h[n] }))
	for range 10 {
		l := pick(t, p, "b", PickRequest{Attempt: 1})
		if l.KeyID == "a" {
			t.Fatal("key with remaining 0 picked before its reset")
		}
		l.Done(status(200))
	}
	clk.Advance(6 * time.Minute)
	n := 0
	for range 10 {
		l := pick(t, p, "b", PickRequest{Attempt: 1})
		if l.KeyID == "a" {
			n++
			if l.Probe {
				t.Fatal("a quota opening needs no probe")
			}
		}
		l.Done(status(200))
	}
	if n != 5 {
		t.Fatalf("after reset a got %d of 10", n)
	}
}

func TestLocalWindowAndInFlight(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(t, "", map[string][]key{"rpm": {{id: "r", rpm: 2}}, "inflight": {{id: "i", max: 1}}})
	p := newPools(t, cfg, Options{Clock: clk, LeaseTTL: time.Minute})
	pick(t, p, "rpm", PickRequest{Attempt: 1}).Done(status(200))
	clk.Advance(30 * time.Second)
	pick(t, p, "rpm", PickRequest{Attempt: 1}).Done(status(200))
	_, err := p.Pick(t.Context(), "rpm", PickRequest{Attempt: 1})
	var ex *ExhaustedError
	if !errors.As(err, &ex) || !errors.Is(err, ErrNoKey) || ex.RetryAfter != 30*time.Second {
		t.Fatalf("third pick in a minute at rpm 2: %v", err)
	}
	if ok, ra := p.Available([]string{"rpm"}); ok || ra != 30*time.Second {
		t.Fatalf("Available = %v %s", ok, ra)
	}
	clk.Advance(30 * time.Second)
	pick(t, p, "rpm", PickRequest{Attempt: 1})

	pick(t, p, "inflight", PickRequest{RequestID: "r1", Attempt: 1}) // never released
	if _, err := p.Pick(t.Context(), "inflight", PickRequest{Attempt: 1}); !errors.Is(err, ErrNoKey) {
		t.Fatalf("second in-flight pick at max_in_flight 1: %v", err)
	}
	clk.Advance(2*time.Minute + time.Second) // a leaked lease lives at most 2·TTL
	pick(t, p, "inflight", PickRequest{Attempt: 1}).Release()
	if s := stateOf(t, p, "i"); s.InFlight != 0 {
		t.Fatalf("in flight after expiry and release: %d", s.InFlight)
	}
}

func TestRetryNeverReusesFailedKey(t *testing.T) {
	cfg := testConfig(t, "", map[string][]key{"b": {{id: "a"}, {id: "b"}, {id: "c"}}})
	p := newPools(t, cfg, Options{Clock: newFakeClock()})
	for i := range 30 {
		req := PickRequest{RequestID: "req-" + string(rune('A'+i)), Attempt: 1}
		first := pick(t, p, "b", req)
		first.Done(status(429))
		req.Attempt = 2
		second := pick(t, p, "b", req)
		if second.KeyID == first.KeyID {
			t.Fatalf("retry reused %s", first.KeyID)
		}
		// A per-try timeout: no outcome, lease still held.
		req.Attempt = 3
		third := pick(t, p, "b", req)
		if third.KeyID == first.KeyID || third.KeyID == second.KeyID {
			t.Fatalf("attempt 3 reused a key: %s %s %s", first.KeyID, second.KeyID, third.KeyID)
		}
		second.Release()
		third.Done(status(200))
	}
}

func TestProbeResolvedThroughReport(t *testing.T) {
	// The ext_proc adapter releases leases with Report, not Done: the probe
	// flag must still be found, and freed when no outcome came.
	clk := newFakeClock()
	cfg := testConfig(t, breakerYAML(10*time.Second, time.Minute, time.Second, 0, false), map[string][]key{"b": {{id: "a"}}})
	p := newPools(t, cfg, Options{Clock: clk})
	for range 2 {
		_ = p.Report(t.Context(), "b", "a", "", status(500))
	}
	clk.Advance(10 * time.Second)
	l := pick(t, p, "b", PickRequest{RequestID: "r1", Attempt: 1})
	if !l.Probe {
		t.Fatal("not a probe")
	}
	if _, err := p.Pick(t.Context(), "b", PickRequest{RequestID: "r2", Attempt: 1}); !errors.Is(err, ErrNoKey) {
		t.Fatalf("second pick while the probe is out: %v", err)
	}
	_ = p.Report(t.Context(), "b", "a", "r1", Outcome{}) // stream ended, no response
	l = pick(t, p, "b", PickRequest{RequestID: "r3", Attempt: 1})
	if !l.Probe {
		t.Fatal("freed probe slot not reused as a probe")
	}
	_ = p.Report(t.Context(), "b", "a", "r3", status(200))
	if s := stateOf(t, p, "a"); s.State != "closed" || s.InFlight != 0 {
		t.Fatalf("after probe success via Report: %+v", s)
	}
}

func TestBestEffortOverflowsHalfOpenOnly(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(t, breakerYAML(10*time.Second, time.Minute, time.Second, 0, false), map[string][]key{"b": {{id: "a"}, {id: "b"}}})
	p := newPools(t, cfg, Options{Clock: clk})
	for _, k := range []string{"a", "b"} {
		for range 2 {
			_ = p.Report(t.Context(), "b", k, "", status(500))
		}
	}
	if _, err := p.Pick(t.Context(), "b", PickRequest{Attempt: 1, BestEffort: true}); !errors.Is(err, ErrNoKey) {
		t.Fatalf("best effort on open keys: %v", err)
	}
	clk.Advance(10 * time.Second)
	p1 := pick(t, p, "b", PickRequest{Attempt: 1})
	p2 := pick(t, p, "b", PickRequest{Attempt: 1})
	if !p1.Probe || !p2.Probe {
		t.Fatal("half-open picks are not probes")
	}
	if _, err := p.Pick(t.Context(), "b", PickRequest{Attempt: 1}); !errors.Is(err, ErrNoKey) {
		t.Fatalf("strict pick with both probes out: %v", err)
	}
	o := pick(t, p, "b", PickRequest{RequestID: "r", Attempt: 1, BestEffort: true})
	if o.Probe || !o.Overflow {
		t.Fatalf("overflow lease: %+v", o)
	}
	o.Done(status(200)) // any success on a half-open key closes it
	if s := stateOf(t, p, o.KeyID); s.State != "closed" {
		t.Fatalf("after overflow success: %s", s.State)
	}
	l := pick(t, p, "b", PickRequest{Attempt: 1, BestEffort: true})
	if l.Overflow {
		t.Fatal("overflow while a closed key exists")
	}
}

func TestRemainingTokensSkipLargeRequests(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(t, breakerYAML(10*time.Second, time.Minute, time.Second, 0, true), map[string][]key{"b": {{id: "a"}, {id: "b"}}})
	p := newPools(t, cfg, Options{Clock: clk})
	h := map[string]string{"x-ratelimit-remaining-tokens": "1000", "x-ratelimit-reset-tokens": "2s"}
	_ = p.Report(t.Context(), "b", "a", "", ParseOutcome(200, func(n string) string { return h[n] }))
	// 1000 tokens left on a: a 5000-token request goes to b, small ones
	// still use a until its estimate is spent.
	for range 4 {
		if l := pick(t, p, "b", PickRequest{Attempt: 1, EstTokens: 5000}); l.KeyID != "b" {
			t.Fatal("large request sent to a key without enough tokens left")
		} else {
			l.Done(status(200))
		}
	}
	toA := 0
	for range 10 {
		l := pick(t, p, "b", PickRequest{Attempt: 1, EstTokens: 300})
		if l.KeyID == "a" {
			toA++
		}
		l.Done(status(200))
	}
	if toA != 3 {
		t.Fatalf("300-token requests on a with 1000 left: %d, want 3", toA)
	}
	clk.Advance(2 * time.Second)
	n := 0
	for range 4 {
		l := pick(t, p, "b", PickRequest{Attempt: 1, EstTokens: 5000})
		if l.KeyID == "a" {
			n++
		}
		l.Done(status(200))
	}
	if n != 2 {
		t.Fatalf("after the token reset a got %d of 4 large requests", n)
	}
}

// TestUndoGivesTokensBack: a pick that is undone (the shared limiter or
// another replica's pace refused it, or its caller left) gives back the
// estimate it took from what the provider said remains; before, picks
// that lost such races drained the key's tokens without sending anything.
// A figure the provider stated since the pick is kept as it is: the
// undone pick was never in it.
func TestUndoGivesTokensBack(t *testing.T) {
	for _, tc := range []struct {
		name       string
		remaining  int
		est        int
		bestEffort bool // picks past the budget, taking only what is left
		since      int  // the provider's figure between pick and undo; 0 none
		want       int
	}{
		{name: "undone pick", remaining: 1000, est: 800, want: 1000},
		{name: "best effort past the budget gives back what it took", remaining: 500, est: 800, bestEffort: true, want: 500},
		{name: "a figure since is kept", remaining: 1000, est: 800, since: 300, want: 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := testConfig(t, breakerYAML(10*time.Second, time.Minute, time.Second, 0, true), map[string][]key{"b": {{id: "a"}}})
			p := newPools(t, cfg, Options{Clock: clk})
			remain := func(n int) Outcome {
				return Outcome{Status: 200, RemainingRequests: -1, RemainingTokens: n, ResetTokens: time.Minute}
			}
			_ = p.Report(t.Context(), "b", "a", "", remain(tc.remaining))
			l := pick(t, p, "b", PickRequest{RequestID: "r1", Attempt: 1, EstTokens: tc.est, BestEffort: tc.bestEffort})
			if tc.since > 0 {
				_ = p.Report(t.Context(), "b", "a", "", remain(tc.since))
			}
			l.pool.undo(clk.Now(), l, tc.est, time.Time{}, time.Time{})
			kp := p.pool("b")
			kp.mu.Lock()
			got := kp.byID["a"].tokensLeft
			kp.mu.Unlock()
			if got != tc.want {
				t.Errorf("tokens left after the undo %d, want %d", got, tc.want)
			}
		})
	}
}

// When every key is over its RPM window or in-flight cap, a best-effort
// pick still returns a closed key (the provider's 429 is retried by Envoy)
// while a strict pick fails; an open key is never given out.
func TestBestEffortIgnoresCapsNotBreakers(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(t, "", map[string][]key{"b": {{id: "a", rpm: 1}, {id: "b", rpm: 1, max: 1}}})
	p := newPools(t, cfg, Options{Clock: clk})
	pick(t, p, "b", PickRequest{Attempt: 1})
	pick(t, p, "b", PickRequest{Attempt: 1})
	if _, err := p.Pick(t.Context(), "b", PickRequest{Attempt: 1}); !errors.Is(err, ErrNoKey) {
		t.Fatalf("strict pick over every window: %v", err)
	}
	l := pick(t, p, "b", PickRequest{Attempt: 1, BestEffort: true})
	if l.KeyID == "" {
		t.Fatal("best effort gave no key")
	}
	for range 3 {
		_ = p.Report(t.Context(), "b", "a", "", status(429))
		_ = p.Report(t.Context(), "b", "b", "", status(429))
	}
	if _, err := p.Pick(t.Context(), "b", PickRequest{Attempt: 1, BestEffort: true}); !errors.Is(err, ErrNoKey) {
		t.Fatalf("best effort with every key open: %v", err)
	}
}

func TestLastResortPick(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(t, breakerYAML(10*time.Second, time.Minute, time.Second, 0, false),
		map[string][]key{"b": {{id: "k1"}, {id: "k2"}, {id: "k3"}}})
	p := newPools(t, cfg, Options{Clock: clk})
	open := func(id string, st int, retryAfter time.Duration) {
		o := ParseOutcome(st, func(h string) string {
			if h == "retry-after" && retryAfter > 0 {
				return fmt.Sprint(int(retryAfter / time.Second))
			}
			return ""
		})
		for range 3 {
			_ = p.Report(t.Context(), "b", id, "", o)
		}
	}
	open("k1", 429, 30*time.Second)
	open("k2", 429, 5*time.Second)
	open("k3", 401, 0)
	if _, err := p.Pick(t.Context(), "b", PickRequest{Attempt: 1, BestEffort: true}); err == nil {
		t.Fatal("best effort picked an open key")
	}
	l, err := p.Pick(t.Context(), "b", PickRequest{Attempt: 1, LastResort: true, RequestID: "r1"})
	if err != nil || l.KeyID != "k2" || !l.Overflow {
		t.Fatalf("last resort %+v %v, want k2 (reopens soonest, not the refused k3)", l, err)
	}
	l.Done(status(429))
	if l, err := p.Pick(t.Context(), "b", PickRequest{Attempt: 2, LastResort: true, RequestID: "r1"}); err != nil || l.KeyID != "k1" {
		t.Fatalf("second attempt %+v %v, want k1 (k2 tried by this request)", l, err)
	}
}

// rotated is cfg with backend b's key id given another secret.
func rotated(t testing.TB, cfg *config.Config, id string) *config.Config {
	t.Helper()
	for i := range cfg.Backends[0].Keys {
		if k := &cfg.Backends[0].Keys[i]; k.ID == id {
			k.Secret = config.SecretFromValue("env:KP_ROTATED", "sk-rotated-"+id)
			return cfg
		}
	}
	t.Fatalf("no key %s", id)
	return nil
}

// TestSecretRotationClearsAuthRefusal: a reload that gives a key a new
// secret under the same id clears its provider's 401/403 refusal, which
// was about the old secret (before, the new one sat out the auth
// cooldown, 30 min by default). Other openings stay: a new secret does
// not fix a failing upstream.
func TestSecretRotationClearsAuthRefusal(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answers   []int
		rotate    bool
		wantState string
	}{
		{"refused, rotated", []int{401}, true, "closed"},
		{"forbidden, rotated", []int{403}, true, "closed"},
		{"refused, same secret", []int{401}, false, "open"},
		{"failing, rotated", []int{503, 503}, true, "open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			keys := map[string][]key{"b": {{id: "a"}}}
			yaml := breakerYAML(time.Minute, time.Hour, time.Second, 0, false)
			p := newPools(t, testConfig(t, yaml, keys), Options{Clock: clk})
			for _, s := range tc.answers {
				_ = p.Report(t.Context(), "b", "a", "", status(s))
			}
			if st := stateOf(t, p, "a"); st.State != "open" {
				t.Fatalf("before the reload: %+v", st)
			}
			next := testConfig(t, yaml, keys)
			if tc.rotate {
				next = rotated(t, next, "a")
			}
			p.SetConfig(next)
			if st := stateOf(t, p, "a"); st.State != tc.wantState {
				t.Fatalf("after the reload: %+v, want %s", st, tc.wantState)
			}
			if tc.wantState == "closed" {
				if l := pick(t, p, "b", PickRequest{Attempt: 1}); l.Secret.Value() != "sk-rotated-a" {
					t.Fatal("picked without the new secret")
				}
			}
		})
	}
}
