package swarm

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

const (
	threshold429 = 3
	inFlight     = 4
)

// faultSpec: relay-a (priority 0) and relay-b (priority 1), two keys each;
// three ext_proc replicas: the router-level filter on replica 0, the
// per-attempt filter round robin over replicas 1 and 2.
func faultSpec(cooldown time.Duration) stackSpec {
	return stackSpec{
		relays: []relaySpec{
			{name: "relay-a", keys: 2, priority: 0},
			{name: "relay-b", keys: 2, priority: 1},
		},
		replicas: 3, routerOn: []int{0}, upstreamOn: []int{1, 2},
		breaker: fmt.Sprintf("  consecutive_429: %d\n  consecutive_5xx: 3\n  cooldown: %s\n  max_cooldown: %s\n  sync_interval: 200ms",
			threshold429, cooldown, 2*cooldown),
		numRetries: 2,
	}
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// load sends n requests with `parallel` in flight and returns the replies.
func load(ctx context.Context, s *stack, prefix string, n, parallel int) []reply {
	out := make([]reply, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				out[i] = post(ctx, s.http, s.sim.URL(), agentKey, fmt.Sprintf("%s-%d", prefix, i))
			}
		})
	}
	wg.Wait()
	return out
}

// noKeyGap: the upstream filter found no key while the backend was still
// healthy in EDS, the attempt left without a credential and the provider's
// 401 reached the client (docs/swarm.md, known gap 2).
func noKeyGap(r reply) bool {
	return r.err == nil && r.status == 401 && strings.Contains(r.body, "invalid_api_key")
}

func requireAllOK(t *testing.T, what string, rs []reply) {
	t.Helper()
	for i, r := range rs {
		if r.err != nil || r.status != 200 {
			t.Fatalf("%s: request %d: status %d err %v body %.200s", what, i, r.status, r.err, r.body)
		}
	}
}

// watchOpen records when each replica first reports key as open.
func watchOpen(ctx context.Context, s *stack, backend, key string) func() []time.Time {
	seen := make([]time.Time, len(s.pools))
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			all := true
			for i, p := range s.pools {
				mu.Lock()
				if seen[i].IsZero() && keyState(p, backend, key) == "open" {
					seen[i] = time.Now()
				}
				all = all && !seen[i].IsZero()
				mu.Unlock()
			}
			if all {
				return
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	return func() []time.Time {
		select {
		case <-done:
		case <-time.After(3 * time.Second):
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), seen...)
	}
}

// A key that starts answering 429 receives at most the breaker threshold
// plus the requests already in flight; the trip reaches every replica
// through Redis; when the key recovers, traffic returns to it.
func TestKey429TripsBreakerAndRecovers(t *testing.T) {
	s := startStack(t, faultSpec(time.Second))
	ctx := testCtx(t, 60*time.Second)
	requireAllOK(t, "warm-up", load(ctx, s, "warm", 8, 2))
	a := s.relay("relay-a")
	k1 := relayKeyID("relay-a", 0)
	before := a.Count(k1)

	a.SetBehavior(k1, mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: time.Second})
	wctx, wcancel := context.WithCancel(ctx)
	opened := watchOpen(wctx, s, "relay-a", k1)
	faultAt := time.Now()
	requireAllOK(t, "during 429s", load(ctx, s, "rl", 40, inFlight))
	seen := opened()
	wcancel()

	hit := a.Count(k1).Requests - before.Requests
	t.Logf("key %s answered 429 to %d requests (bound %d = threshold %d + %d in flight)", k1, hit, threshold429+inFlight, threshold429, inFlight)
	if hit == 0 || hit > threshold429+inFlight {
		t.Errorf("rate-limited key saw %d requests after the fault, want 1..%d", hit, threshold429+inFlight)
	}
	first := time.Time{}
	for i, at := range seen {
		if at.IsZero() {
			t.Fatalf("replica %d never saw %s open", i, k1)
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	var lags []string
	for i, at := range seen {
		lag := at.Sub(first)
		lags = append(lags, fmt.Sprintf("r%d +%v", i, lag.Round(10*time.Microsecond)))
		// sync_interval 200 ms bounds the poll backstop; pub/sub is faster.
		if lag > 300*time.Millisecond {
			t.Errorf("replica %d adopted the trip %v after the first, bound 300ms", i, lag)
		}
	}
	t.Logf("fault→first replica open %v; propagation: %s", first.Sub(faultAt).Round(10*time.Microsecond), strings.Join(lags, ", "))

	// Recovery: the key answers again; after its open period (Retry-After
	// 1 s) a half-open probe closes it and it gets its share back.
	a.SetBehavior(k1, mockupstream.Behavior{})
	recoverAt := time.Now()
	okBefore := a.Count(k1).OK
	back := waitUntilLoad(t, ctx, s, "traffic back on "+k1, 5*time.Second, func() bool { return a.Count(k1).OK > okBefore })
	t.Logf("recovered key served again %v after it recovered (open period 1s)", back.Sub(recoverAt).Round(time.Millisecond))
	okBefore = a.Count(k1).OK
	requireAllOK(t, "after recovery", load(ctx, s, "after", 20, 2))
	if got := a.Count(k1).OK - okBefore; got < 5 {
		t.Errorf("recovered key served %d of 20 requests, want its share (≥5)", got)
	}
}

// waitUntilLoad sends one request at a time until cond holds.
func waitUntilLoad(t *testing.T, ctx context.Context, s *stack, what string, within time.Duration, cond func() bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for i := 0; !cond(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		if r := post(ctx, s.http, s.sim.URL(), agentKey, fmt.Sprintf("probe-%d", i)); r.err != nil || r.status != 200 {
			t.Fatalf("%s: status %d err %v %.200s", what, r.status, r.err, r.body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Now()
}

// A whole relay failing (503s or connection resets) opens all its keys;
// the control plane pushes EDS with it unhealthy and new requests go to
// the next priority at their first attempt. Clients see no error meanwhile
// (retries move to the next priority with previous_priorities).
func TestRelayDownFailsOverThroughEDS(t *testing.T) {
	tests := []struct {
		name string
		b    mockupstream.Behavior
		// knownGap names a defect that keeps the case from passing yet.
		knownGap string
	}{
		{"503", mockupstream.Behavior{Action: mockupstream.ActError, Status: 503}, ""},
		{"reset", mockupstream.Behavior{Action: mockupstream.ActReset}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.knownGap != "" && os.Getenv("SWARMGATE_KNOWN_GAPS") == "" {
				t.Skip("known gap (set SWARMGATE_KNOWN_GAPS=1 to run): " + tc.knownGap)
			}
			// A 3 s cooldown keeps relay-a's first-tripped key open while
			// the checks after the push run, even on a slow -race box.
			s := startStack(t, faultSpec(3*time.Second))
			ctx := testCtx(t, 60*time.Second)
			requireAllOK(t, "warm-up", load(ctx, s, "warm", 4, 2))
			a, b := s.relay("relay-a"), s.relay("relay-b")
			aAddr := s.relayAddr("relay-a")
			since := s.eds.pushes()
			s.health.mu.Lock()
			signalsBefore := len(s.health.at)
			s.health.mu.Unlock()

			a.SetDefaultBehavior(tc.b)
			faultAt := time.Now()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var bad, gap2 atomic.Int64
			var sent atomic.Int64
			for w := range inFlight {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						sent.Add(1)
						r := post(ctx, s.http, s.sim.URL(), agentKey, fmt.Sprintf("down-%d-%d", w, i))
						switch {
						case r.err == nil && r.status == 200:
						case noKeyGap(r):
							gap2.Add(1)
						default:
							bad.Add(1)
							t.Errorf("during the outage: status %d err %v %.200s", r.status, r.err, r.body)
						}
					}
				})
			}
			edsAt, ok := s.eds.waitHealth(since, aAddr, true, 10*time.Second)
			close(stop)
			wg.Wait()
			if !ok {
				t.Fatalf("no EDS update marked relay-a unhealthy within 10s (%d requests sent)", sent.Load())
			}
			s.health.mu.Lock()
			var signalAt time.Time
			if len(s.health.at) > signalsBefore {
				signalAt = s.health.at[signalsBefore]
			}
			s.health.mu.Unlock()
			if signalAt.IsZero() {
				t.Fatal("EDS changed without a key-pool health signal")
			}
			t.Logf("%s: fault→backend unhealthy on the control plane's pools %v; health signal→EDS applied in the sim %v; %d requests during the outage, %d failed, %d provider 401s for want of a key (known gap 2)",
				tc.name, signalAt.Sub(faultAt).Round(10*time.Microsecond), edsAt.Sub(signalAt).Round(10*time.Microsecond), sent.Load(), bad.Load(), gap2.Load())
			if gap2.Load() > 0 {
				t.Errorf("%d clients got a provider 401 because no key was picked", gap2.Load())
			}
			if d := edsAt.Sub(signalAt); d > 500*time.Millisecond {
				t.Errorf("EDS push took %v after the health signal, want < 500ms", d)
			}

			// The replicas agree: each one's pools (through Redis) hold
			// relay-a unhealthy.
			for i, p := range s.pools {
				if p.BackendHealth()["relay-a"] {
					t.Errorf("replica %d still has a usable relay-a key", i)
				}
			}
			// After the push, first attempts go to priority 1: relay-a sees
			// nothing.
			aBefore, bBefore := a.Total().Requests, b.Total().Requests
			rs := load(ctx, s, "after-eds", 20, 2)
			requireAllOK(t, "after EDS", rs)
			if n := a.Total().Requests - aBefore; n != 0 {
				t.Errorf("relay-a received %d requests after EDS marked it unhealthy", n)
			}
			if n := b.Total().Requests - bBefore; n != 20 {
				t.Errorf("relay-b received %d of 20 requests", n)
			}
			for i := range 20 {
				rec, ok := waitRecord(t, s.sim, fmt.Sprintf("after-eds-%d", i))
				if !ok || len(rec.Attempts) != 1 || rec.Attempts[0].Priority != 1 {
					t.Errorf("after-eds-%d: attempts %+v", i, rec.Attempts)
				}
			}

			// The relay comes back: when the keys' open period ends the
			// backend is healthy again (half-open), EDS says so, and a probe
			// brings traffic back.
			since = s.eds.pushes()
			a.SetDefaultBehavior(mockupstream.Behavior{})
			healAt := time.Now()
			healthyAt, ok := s.eds.waitHealth(since, aAddr, false, 10*time.Second)
			if !ok {
				t.Fatal("no EDS update marked relay-a healthy again within 10s")
			}
			okBefore := a.Total().OK
			back := waitUntilLoad(t, ctx, s, "traffic back on relay-a", 5*time.Second, func() bool { return a.Total().OK > okBefore })
			t.Logf("%s: relay healthy in EDS %v after it recovered, serving again %v after (cooldown 3s from each trip)", tc.name,
				healthyAt.Sub(healAt).Round(time.Millisecond), back.Sub(healAt).Round(time.Millisecond))
		})
	}
}

// Every key of the only backend rate limited: the client gets a prompt 429
// or 503, not a hang; once the breakers are open, admission answers 429
// (or 503 upstream_keys_exhausted) with Retry-After locally and the relay is no longer asked at all.
//
// The request whose attempts trip the last key is different: its retry
// finds no usable key (the upstream filter answers 429 locally, Envoy does
// not retry that) or EDS already marking the only endpoint unhealthy (pool
// clusters never panic-route: Envoy's "no healthy upstream", which the
// router-level ext_proc answers as a 429 with the soonest reopening as
// Retry-After). A request right after it may still pass admission on a
// replica that has not adopted the trip yet: its attempt is answered
// locally by the upstream filter and never leaves Envoy.
func TestAllKeysExhaustedAnswersRetryAfter(t *testing.T) {
	sp := faultSpec(time.Second)
	sp.relays = []relaySpec{{name: "solo", keys: 2, priority: 0}}
	sp.admission = "  max_wait: 0" // refused at once, not queued for the keys' return
	s := startStack(t, sp)
	ctx := testCtx(t, 30*time.Second)
	relay := s.relay("solo")
	relay.SetDefaultBehavior(mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: 5 * time.Second})
	var relayAfterTrip int
	for i := range 12 {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r := post(rctx, s.http, s.sim.URL(), agentKey, fmt.Sprintf("ex-%d", i))
		cancel()
		if r.err != nil {
			t.Fatalf("request %d: %v after %v (hang?)", i, r.err, r.latency)
		}
		rec, _ := waitRecord(t, s.sim, fmt.Sprintf("ex-%d", i))
		if i == 0 {
			t.Logf("tripping request: %d retry-after %q in %v, %d upstream attempts: %.80s", r.status, r.header.Get("retry-after"),
				r.latency.Round(100*time.Microsecond), len(rec.Attempts), r.body)
			if r.status != 429 && r.status != 503 || r.header.Get("retry-after") == "" {
				t.Fatalf("tripping request: status %d retry-after %q", r.status, r.header.Get("retry-after"))
			}
			relayAfterTrip = relay.Total().Requests
			continue
		}
		sent := 0
		for _, a := range rec.Attempts {
			if a.Header != nil { // left Envoy
				sent++
			}
		}
		if (r.status != 429 && r.status != 503) || r.header.Get("retry-after") == "" || !strings.Contains(r.body, `"error"`) || sent != 0 {
			t.Fatalf("request %d: status %d retry-after %q attempts that left Envoy %d body %.200s", i, r.status, r.header.Get("retry-after"), sent, r.body)
		}
		if i == 11 {
			t.Logf("after the trip: %d retry-after %s in %v, local reply", r.status, r.header.Get("retry-after"), r.latency.Round(100*time.Microsecond))
		}
	}
	if n := relay.Total().Requests - relayAfterTrip; n != 0 {
		t.Errorf("relay asked %d more times after every key was open", n)
	}
}

// Redis killed and restarted under load: every request is answered 200
// within its deadline, including while a key trips during the outage
// (breaker sync fails open to local state).
func TestRedisKilledUnderLoad(t *testing.T) {
	s := startStack(t, faultSpec(time.Second))
	ctx := testCtx(t, 60*time.Second)
	const workers, per = 6, 40
	var done atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var fails []string
	var slowest time.Duration
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				r := post(rctx, s.http, s.sim.URL(), agentKey, fmt.Sprintf("redis-%d-%d", w, i))
				cancel()
				mu.Lock()
				slowest = max(slowest, r.latency)
				if r.err != nil || r.status != 200 {
					fails = append(fails, fmt.Sprintf("%d/%d: %d %v %.120s", w, i, r.status, r.err, r.body))
				}
				mu.Unlock()
				done.Add(1)
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	total := int64(workers * per)
	waitUntil(t, "a third of the load", 30*time.Second, func() bool { return done.Load() >= total/3 })
	s.redis.Stop()
	stoppedAt := done.Load()
	s.relay("relay-a").SetBehavior(relayKeyID("relay-a", 0), mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: time.Second})
	waitUntil(t, "two thirds of the load", 30*time.Second, func() bool { return done.Load() >= 2*total/3 })
	s.redis.Restart()
	restartedAt := done.Load()
	wg.Wait()
	t.Logf("%d requests (%d before the kill, %d while Redis was down), %d failed, slowest %v",
		total, stoppedAt, restartedAt-stoppedAt, len(fails), slowest.Round(time.Millisecond))
	if len(fails) > 0 {
		t.Errorf("%d requests failed: %s", len(fails), strings.Join(fails[:min(5, len(fails))], "; "))
	}
	if done.Load() != total {
		t.Errorf("%d of %d requests answered", done.Load(), total)
	}

	// Sharing resumes after the restart: a trip on one replica reaches the
	// others again.
	k2 := relayKeyID("relay-a", 1)
	s.relay("relay-a").SetBehavior(k2, mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: 5 * time.Second})
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	opened := watchOpen(wctx, s, "relay-a", k2)
	restarted := time.Now()
	waitUntilLoad(t, ctx, s, k2+" tripped", 5*time.Second, func() bool { return s.relay("relay-a").Count(k2).RateLimited > 0 })
	seen := opened()
	var first, last time.Time
	for i, at := range seen {
		if at.IsZero() {
			t.Fatalf("after the restart replica %d never saw %s open", i, k2)
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	t.Logf("after the restart: trip reached every replica %v after the first (%v after the 429 was set)",
		last.Sub(first).Round(10*time.Microsecond), last.Sub(restarted).Round(time.Millisecond))
	if last.Sub(first) > time.Second {
		t.Errorf("after the restart the trip took %v to reach every replica", last.Sub(first))
	}
}
