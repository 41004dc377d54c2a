package keypool

import (
	"math"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// TestPaceFromLearnedLimits: the pace is the sum over serving keys of the
// lower of configured and stated limits; a key without any limit leaves
// that measure unpaced; a key resting for its quota window still counts, a
// tripped one does not; limits one replica learns reach the others through
// Redis (a router-level replica never sees an upstream answer).
func TestPaceFromLearnedLimits(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, 20*time.Millisecond, 0, true)+
		"redis: {read_timeout: 200ms, dial_timeout: 200ms}\n",
		map[string][]key{"b": {{id: "a", rpm: 600}, {id: "b"}, {id: "c"}}})
	ps := replicas(t, srv, cfg, 2)
	limits := func(rpm, tpm, remaining string) Outcome {
		return ParseOutcome(200, func(n string) string {
			return map[string]string{"x-ratelimit-limit-requests": rpm, "x-ratelimit-limit-tokens": tpm,
				"x-ratelimit-remaining-requests": remaining, "x-ratelimit-reset-requests": "1s"}[n]
		})
	}
	rate := func(p *Pools) [2]float64 {
		r, tk := p.Pace([]string{"b"})
		// Rounded: the share is applied in floating point.
		return [2]float64{math.Round(r/admitShare*1e9) / 1e9, math.Round(tk/admitShare*1e9) / 1e9}
	}
	if got := rate(ps[0]); got != [2]float64{0, 0} {
		t.Fatalf("nothing learned: %v, want unpaced (keys b and c have no limit)", got)
	}
	report := func(key string, o Outcome) {
		if err := ps[0].Report(t.Context(), "b", key, "", o); err != nil {
			t.Fatal(err)
		}
	}
	report("a", limits("1200", "60000", "5")) // configured 600 is lower
	report("b", limits("300", "30000", "5"))
	report("c", limits("300", "", "5"))
	want := [2]float64{(600 + 300 + 300) / 60.0, 0} // c states no tpm: tokens unpaced
	if got := rate(ps[0]); got != want {
		t.Fatalf("learned on its own replica: %v, want %v", got, want)
	}
	waitFor(t, 2*time.Second, "limits shared with the other replica", func() bool { return rate(ps[1]) == want })

	report("c", limits("300", "", "0")) // remaining 0: resting until its window resets
	if got := rate(ps[0]); got != want {
		t.Fatalf("a key resting for its window left the pace: %v", got)
	}
	trip(t, ps[0], "b") // three 429s: out
	if got := rate(ps[0]); got != [2]float64{(600 + 300) / 60.0, 0} {
		t.Fatalf("after b tripped: %v", got)
	}
}

// TestLearnedLimitsSurviveRedisOutage: limits learned while Redis is down
// reach the other replicas once it is back (empty after its restart),
// without waiting for the provider to state a new limit.
func TestLearnedLimitsSurviveRedisOutage(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, 20*time.Millisecond, 0, true)+
		"redis: {read_timeout: 200ms, dial_timeout: 200ms}\n",
		map[string][]key{"b": {{id: "a"}, {id: "b"}}})
	ps := replicas(t, srv, cfg, 2)
	limits := func(rpm string) Outcome {
		return ParseOutcome(200, func(n string) string {
			return map[string]string{"x-ratelimit-limit-requests": rpm, "x-ratelimit-remaining-requests": "5"}[n]
		})
	}
	rpm := func(p *Pools) float64 {
		r, _ := p.Pace([]string{"b"})
		return math.Round(r / admitShare * 60)
	}
	srv.Stop()
	for _, k := range []string{"a", "b"} {
		if err := ps[0].Report(t.Context(), "b", k, "", limits("300")); err != nil {
			t.Fatal(err)
		}
	}
	if got := rpm(ps[0]); got != 600 {
		t.Fatalf("learned on its own replica: %v rpm, want 600", got)
	}
	// The writes fail while Redis is down (the writer's read timeout).
	waitFor(t, 5*time.Second, "the sync to notice Redis down", func() bool { return ps[0].sync.down.Load() })
	srv.Restart()
	waitFor(t, 5*time.Second, "limits learned during the outage shared", func() bool { return rpm(ps[1]) == 600 })
}
