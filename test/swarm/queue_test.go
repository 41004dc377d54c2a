package swarm

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// queueSpec: one relay, one key, router-level filter on replica 0 and
// attempts on replicas 1 and 2; the admission queue holds requests up to
// 4 s (Envoy's message timeout is 5 s: the wait lives on the override).
func queueSpec(maxWait string) stackSpec {
	return stackSpec{
		relays:     []relaySpec{{name: "relay-a", keys: 1, mock: mockupstream.Behavior{}}},
		replicas:   3,
		routerOn:   []int{0},
		upstreamOn: []int{1, 2},
		breaker:    "  consecutive_429: 3\n  cooldown: 1s\n  jitter: 0\n  sync_interval: 100ms",
		admission:  "  max_wait: " + maxWait,
	}
}

// TestQueueWaitsForReopenedKey: the only key answers one 429 with
// Retry-After 1 s (its breaker opens for 1 s on every replica). Without a
// queue the next request is a local 429; with one it waits for the key and
// is served 200, with Envoy's message timer extended on the real stream.
func TestQueueWaitsForReopenedKey(t *testing.T) {
	s := startStack(t, queueSpec("4s"))
	base := s.sim.URL()
	key := relayKeyID("relay-a", 0)
	s.relay("relay-a").SetBehavior(key, mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: time.Second})
	first := post(context.Background(), s.http, base, agentKey, "")
	if first.status != http.StatusTooManyRequests {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	waitUntil(t, "key open on the router replica", 2*time.Second, func() bool { return keyState(s.pools[0], "relay-a", key) == "open" })
	s.relay("relay-a").SetBehavior(key, mockupstream.Behavior{})
	r := post(context.Background(), s.http, base, agentKey, "")
	if r.status != http.StatusOK {
		t.Fatalf("queued request: %d %s", r.status, r.body)
	}
	if r.latency < 200*time.Millisecond || r.latency > 4*time.Second {
		t.Errorf("queued request answered after %s: want a wait for the key, within max_wait", r.latency)
	}
	t.Logf("served after waiting %s in the queue", r.latency.Round(time.Millisecond))
}

// TestQueueCancelLeavesAtOnce: a client that goes away while queued leaves
// the queue (the ext_proc stream's context ends), and no upstream attempt
// is made for it.
func TestQueueCancelLeavesAtOnce(t *testing.T) {
	s := startStack(t, queueSpec("4s"))
	base := s.sim.URL()
	restOnlyKey(t, s, 3*time.Second, 0)
	before := s.relay("relay-a").Total().Requests
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan reply)
	go func() { done <- post(ctx, s.http, base, agentKey, "") }()
	waitUntil(t, "request queued", 2*time.Second, func() bool { return s.queues[0].Waiting() == 1 })
	cancel()
	<-done
	waitUntil(t, "queue empty after cancel", time.Second, func() bool { return s.queues[0].Waiting() == 0 })
	if after := s.relay("relay-a").Total().Requests; after != before {
		t.Errorf("a cancelled queued request reached the relay: %d -> %d", before, after)
	}
}

// TestQueueTimeoutIs429WithRetryAfter: a key closed longer than the wait
// gives a 429 with Retry-After, not a 5xx.
func TestQueueTimeoutIs429WithRetryAfter(t *testing.T) {
	s := startStack(t, queueSpec("300ms"))
	base := s.sim.URL()
	restOnlyKey(t, s, 5*time.Second, 0)
	r := post(context.Background(), s.http, base, agentKey, "")
	if r.status != http.StatusTooManyRequests || r.header.Get("retry-after") == "" {
		t.Fatalf("got %d retry-after %q: %s", r.status, r.header.Get("retry-after"), r.body)
	}
}

// TestQueueDrainsThroughRedisOutage: requests queued in the shared order of
// two router replicas while the only key is closed are all served when
// Redis dies and the key reopens: each replica goes on in its own order
// (failure_modes.admission_order: open, the default) and drains its
// waiters, none waits out max_wait; after Redis returns, new requests are
// served again.
func TestQueueDrainsThroughRedisOutage(t *testing.T) {
	sp := queueSpec("8s")
	sp.routerOn = []int{0, 1}
	s := startStack(t, sp)
	base := s.sim.URL()
	key := restOnlyKey(t, s, 3*time.Second, 0, 1)

	const n = 40
	replies := make(chan reply, n)
	for range n {
		go func() { replies <- post(context.Background(), s.http, base, agentKey, "") }()
	}
	waitUntil(t, "every request queued", 5*time.Second, func() bool { return s.queues[0].Waiting()+s.queues[1].Waiting() == n })
	s.redis.Stop()
	s.relay("relay-a").SetBehavior(key, mockupstream.Behavior{})
	var ok int
	var slowest time.Duration
	for range n {
		r := <-replies
		slowest = max(slowest, r.latency)
		if r.status == http.StatusOK {
			ok++
		} else {
			t.Errorf("queued request: %d %v %.200s", r.status, r.err, r.body)
		}
	}
	orderErrs := counterSum(t, s, "swarmgate_admission_order_errors_total")
	t.Logf("%d of %d queued requests served with Redis down, the slowest after %s; order steps that failed: %.0f",
		ok, n, slowest.Round(time.Millisecond), orderErrs)
	if orderErrs == 0 {
		t.Error("no order step failed: the requests did not drain through the replicas' own orders")
	}
	if slowest >= 8*time.Second {
		t.Errorf("a queued request waited %s: the replicas did not drain through their own order", slowest)
	}
	s.redis.Restart()
	if r := post(context.Background(), s.http, base, agentKey, ""); r.status != http.StatusOK {
		t.Errorf("after Redis returned: %d %.200s", r.status, r.body)
	}
}

// restOnlyKey has relay-a's only key answer 429 with retryAfter, sends one
// request so that it does, and waits until the key is open on the given
// router replicas. It returns the key's id.
func restOnlyKey(t *testing.T, s *stack, retryAfter time.Duration, routers ...int) string {
	t.Helper()
	key := relayKeyID("relay-a", 0)
	s.relay("relay-a").SetBehavior(key, mockupstream.Behavior{Action: mockupstream.ActRateLimit, RetryAfter: retryAfter})
	_ = post(context.Background(), s.http, s.sim.URL(), agentKey, "")
	waitUntil(t, "key open", 2*time.Second, func() bool {
		for _, i := range routers {
			if keyState(s.pools[i], "relay-a", key) != "open" {
				return false
			}
		}
		return true
	})
	return key
}
