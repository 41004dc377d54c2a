package swarm

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

// TestQueueCancelAtScale is TestQueueCancelLeavesAtOnce for a swarm: 300
// agents (2,000 with SWARMGATE_SWARM_FULL=1) arrive at once on two router
// replicas while the only key rests and all join the shared order; then
// all their clients go away at once. Every one leaves its replica's queue
// and the shared order within seconds, none reaches the relay, and once
// the key is back a new request is served at once: no ticket of a
// departed client holds it back.
func TestQueueCancelAtScale(t *testing.T) {
	n := 300
	if fullSwarm() {
		n = 2000
	}
	sp := queueSpec("8s")
	sp.routerOn = []int{0, 1}
	s := startStack(t, sp)
	base := s.sim.URL()
	key := restOnlyKey(t, s, 5*time.Second, 0, 1)
	before := s.relay("relay-a").Total().Requests

	ctx, cancel := context.WithCancel(context.Background())
	replies := make(chan reply, n)
	for range n {
		go func() { replies <- post(ctx, s.http, base, agentKey, "") }()
	}
	waitUntil(t, "every request queued", 20*time.Second, func() bool { return s.queues[0].Waiting()+s.queues[1].Waiting() == n })
	rdb := s.redis.Client()
	defer rdb.Close()
	// The burst itself joins the shared order: waiting for a pooled
	// connection is not the order failing (redisconn.RoundTrip).
	orderErrs := counterSum(t, s, "swarmgate_admission_order_errors_total")
	if orderErrs > 0 {
		t.Errorf("%.0f order steps failed while %d requests queued at once", orderErrs, n)
	}
	if queued := tickets(t, rdb); queued == 0 {
		t.Fatalf("no ticket in the shared order while requests wait (%.0f order errors): the check below would prove nothing", orderErrs)
	}
	start := time.Now()
	cancel()
	for range n {
		if r := <-replies; r.err == nil {
			t.Errorf("a queued request was answered %d after its client left: %.200s", r.status, r.body)
		}
	}
	waitUntil(t, "both queues empty", 5*time.Second, func() bool { return s.queues[0].Waiting()+s.queues[1].Waiting() == 0 })
	left := time.Since(start)
	waitUntil(t, "no ticket left in the shared order", 5*time.Second, func() bool { return tickets(t, rdb) == 0 })
	if after := s.relay("relay-a").Total().Requests; after != before {
		t.Errorf("cancelled queued requests reached the relay: %d -> %d", before, after)
	}
	t.Logf("%d queued requests cancelled: queues and shared order empty %s after the cancel (%.0f leaves retried; order errors while queueing %.0f)",
		n, left.Round(time.Millisecond), counterSum(t, s, "swarmgate_admission_leave_retries_total"), orderErrs)

	// The key back: a new request is not behind departed tickets.
	s.relay("relay-a").SetBehavior(key, mockupstream.Behavior{})
	waitUntil(t, "key closed again", 8*time.Second, func() bool {
		return keyState(s.pools[0], "relay-a", key) != "open" && keyState(s.pools[1], "relay-a", key) != "open"
	})
	r := post(context.Background(), s.http, base, agentKey, "")
	if r.status != http.StatusOK || r.latency > time.Second {
		t.Errorf("a new request after the cancel: %d after %s: %.200s", r.status, r.latency, r.body)
	}
}

// tickets counts the requests waiting in every scope of the shared
// admission order.
func tickets(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), "*admission:{*}:q").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, k := range keys {
		c, err := rdb.ZCard(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		n += c
	}
	return n
}
