package keypool

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// withGrace sets breaker.reset_grace on p (the YAML helpers write the
// breaker as one flow mapping).
func withGrace(p *Pools, d time.Duration) {
	pol := *p.pol.Load()
	pol.resetGrace = d
	p.pol.Store(&pol)
}

func verdicts(p *Pools, backend, verdict string) int {
	return int(counter(p.metrics.unanswered.WithLabelValues(backend, verdict)))
}

func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

// unansweredAttempt picks a key for req and ends the attempt without
// response headers.
func unansweredAttempt(t *testing.T, p *Pools, req string) Lease {
	t.Helper()
	l := pick(t, p, "b", PickRequest{RequestID: req, Attempt: 1})
	if err := p.Unanswered(t.Context(), "b", l.KeyID, req); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestResetGraceFromConfig(t *testing.T) {
	cfg := testConfig(t, "breaker: {reset_grace: 40ms}\n", map[string][]key{"b": {{id: "a"}}})
	if g := newPools(t, cfg, Options{}).pol.Load().resetGrace; g != 40*time.Millisecond {
		t.Fatalf("reset_grace %s, want 40ms", g)
	}
}

// Attempts that end without response headers count against their key
// only when their request's client did not go away.
func TestUnansweredVerdicts(t *testing.T) {
	const grace = 30 * time.Millisecond
	tests := []struct {
		name string
		// cancel: when the router-level stream reports the client gone,
		// relative to the attempt ending ("" never).
		cancel     string
		grace      time.Duration
		wantOpen   bool
		wantVerdic string
	}{
		{"upstream reset", "", grace, true, verdictReset},
		{"client gone before the attempt ended", "before", grace, false, verdictCancelled},
		{"client gone within the grace", "after", grace, false, verdictCancelled},
		{"no grace: counted at once, as before", "after", 0, true, verdictReset},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// consecutive_5xx 2: two unanswered attempts on one key open it.
			cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, time.Second, 0, false), map[string][]key{"b": {{id: "a"}}})
			p := newPools(t, cfg, Options{})
			withGrace(p, tc.grace)
			for i := range 2 {
				req := fmt.Sprint("req-", i)
				if tc.cancel == "before" {
					p.Cancelled(req)
				}
				l := unansweredAttempt(t, p, req)
				if s := stateOf(t, p, l.KeyID); s.InFlight != 0 {
					t.Fatalf("in-flight slot kept after the attempt ended: %+v", s)
				}
				if tc.cancel == "after" {
					p.Cancelled(req)
				}
			}
			waitFor(t, time.Second, "verdicts", func() bool { return verdicts(p, "b", tc.wantVerdic) == 2 })
			other := map[string]string{verdictReset: verdictCancelled, verdictCancelled: verdictReset}[tc.wantVerdic]
			if n := verdicts(p, "b", other); n != 0 {
				t.Errorf("%d %s verdicts", n, other)
			}
			if open := stateOf(t, p, "a").State == "open"; open != tc.wantOpen {
				t.Errorf("key open %v, want %v: %+v", open, tc.wantOpen, stateOf(t, p, "a"))
			}
		})
	}
}

// The request's next attempt avoids the key at once, whatever the verdict
// turns out to be: a retry must not wait for it.
func TestUnansweredKeyNotRetried(t *testing.T) {
	// Weighted 100:1, round robin alone would give the retry "a" again.
	cfg := testConfig(t, "", map[string][]key{"b": {{id: "a", weight: 100}, {id: "b"}}})
	p := newPools(t, cfg, Options{})
	withGrace(p, time.Hour) // the verdict never comes during the test
	for i := range 4 {
		req := fmt.Sprint("req-", i)
		first := unansweredAttempt(t, p, req)
		if first.KeyID != "a" {
			t.Fatalf("%s: first attempt on %s, want the heavy key", req, first.KeyID)
		}
		second := pick(t, p, "b", PickRequest{RequestID: req, Attempt: 2})
		if second.KeyID == first.KeyID {
			t.Fatalf("%s: retry reused %s", req, first.KeyID)
		}
		second.Done(status(200))
	}
	if n := verdicts(p, "b", verdictReset) + verdicts(p, "b", verdictCancelled); n != 0 {
		t.Fatalf("%d verdicts before the grace ended", n)
	}
}

// Envoy may run the router-level stream and the attempt's stream of one
// request on different replicas: the cancel reaches the other through
// Redis, and a mass cancel does not open the keys there.
func TestCancelOnOtherReplica(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, time.Second, 0, false)+"redis: {read_timeout: 200ms, dial_timeout: 200ms}\n",
		map[string][]key{"b": {{id: "a"}, {id: "b"}}})
	ps := replicas(t, srv, cfg, 2)
	const grace = 200 * time.Millisecond
	for _, p := range ps {
		withGrace(p, grace)
	}
	const n = 200 // every key far past consecutive_5xx
	for i := range n {
		req := fmt.Sprint("swarm-", i)
		ps[0].Cancelled(req)             // the client's router-level stream, replica 0
		unansweredAttempt(t, ps[1], req) // its attempt, replica 1
	}
	waitFor(t, 5*time.Second, "verdicts", func() bool {
		return verdicts(ps[1], "b", verdictCancelled)+verdicts(ps[1], "b", verdictReset) == n
	})
	if r := verdicts(ps[1], "b", verdictReset); r != 0 {
		t.Errorf("%d of %d cancelled attempts counted as resets", r, n)
	}
	for _, id := range []string{"a", "b"} {
		if s := stateOf(t, ps[1], id); s.State != "closed" {
			t.Errorf("key %s %s after a mass client cancel", id, s.State)
		}
	}
	ttl, err := srv.Client().PTTL(t.Context(), "sg:keypool:cancel:swarm-0").Result()
	if err != nil || ttl <= 0 || ttl > cancelTTL(grace) {
		t.Errorf("cancel record ttl %s %v, want (0, %s]", ttl, err, cancelTTL(grace))
	}

	// Without a cancel anywhere, unanswered attempts are resets on every
	// replica's view: the trip is shared as usual.
	for i := range 2 {
		req := fmt.Sprint("reset-", i)
		l := pick(t, ps[1], "b", PickRequest{RequestID: req, Attempt: 1})
		if l.KeyID != "a" {
			l.Done(status(200))
			l = pick(t, ps[1], "b", PickRequest{RequestID: req, Attempt: 1})
		}
		if err := ps[1].Unanswered(t.Context(), "b", l.KeyID, req); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "reset trips key a on the other replica", func() bool { return stateOf(t, ps[0], "a").State == "open" })
}

// With Redis down, a cancel on another replica cannot be known: the attempt
// counts as a reset, as it would with no grace at all (and the failure is
// counted in the sync error metric).
func TestUnansweredRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, time.Second, 0, false)+"redis: {read_timeout: 100ms, dial_timeout: 100ms}\n",
		map[string][]key{"b": {{id: "a"}}})
	p := newPools(t, cfg, Options{Redis: redisClient(t, srv.Addr), ReplicaID: "r"})
	withGrace(p, 20*time.Millisecond)
	srv.Stop()
	unansweredAttempt(t, p, "r-1")
	waitFor(t, 2*time.Second, "reset verdict", func() bool { return verdicts(p, "b", verdictReset) == 1 })
	if n := counter(p.metrics.syncErrors.WithLabelValues("cancel_read")); n < 1 {
		t.Errorf("cancel_read sync errors %v, want the failed read counted", n)
	}
	// A cancel on this replica still holds without Redis.
	p.Cancelled("r-2")
	unansweredAttempt(t, p, "r-2")
	if n := verdicts(p, "b", verdictCancelled); n != 1 {
		t.Errorf("local cancel: %d cancelled verdicts, want 1", n)
	}
}

func TestRequestSetForgets(t *testing.T) {
	const ttl = 10 * time.Second
	t0 := time.Unix(1_800_000_000, 0)
	tests := []struct {
		after time.Duration
		want  bool
	}{
		{0, true},
		{ttl - time.Millisecond, true},
		{ttl + time.Millisecond, true}, // the older generation still holds it
		{2*ttl - time.Millisecond, true},
		{2*ttl + time.Millisecond, false},
		{10 * ttl, false},
	}
	for _, tc := range tests {
		var s requestSet
		s.add("r", t0, ttl)
		if got := s.has("r", t0.Add(tc.after)); got != tc.want {
			t.Errorf("after %s: has %v, want %v", tc.after, got, tc.want)
		}
		if s.has("other", t0.Add(tc.after)) {
			t.Errorf("after %s: has a request never added", tc.after)
		}
	}
}

// TestNoVerdictAfterRun: once Pools.Run has ended, an attempt whose grace
// runs out later gets no verdict (the process is stopping: its Redis client
// and metrics may be gone); before that, the same attempt gets one.
func TestNoVerdictAfterRun(t *testing.T) {
	const grace = 50 * time.Millisecond
	cfg := testConfig(t, "", map[string][]key{"b": {{id: "a"}}})
	p := newPools(t, cfg, Options{})
	withGrace(p, grace)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	unansweredAttempt(t, p, "before-stop")
	waitFor(t, time.Second, "the verdict while running", func() bool { return verdicts(p, "b", verdictReset) == 1 })

	unansweredAttempt(t, p, "at-stop")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * grace) // well past the attempt's grace
	if n := verdicts(p, "b", verdictReset); n != 1 {
		t.Errorf("%d reset verdicts, want 1: the pending attempt got a verdict after Run ended", n)
	}
}
