package admission

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redisconn"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// orderClient is the gateway's order client: round trips bounded by
// 50 ms, the wait for a connection apart.
func orderClient(t *testing.T, srv *redistest.Server) redis.UniversalClient {
	t.Helper()
	rdb, err := redisconn.New(config.Redis{Addrs: []string{srv.Addr}, DialTimeout: config.Duration{Duration: time.Second},
		ReadTimeout: config.Duration{Duration: 3 * time.Second}}, redisconn.RoundTrip(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestSlowRedisFailsOpenAtTheBound: with the shared order on a Redis that
// answers late (paused 1 s), a request failing open goes on in the
// replica's own order once the round trip's bound has passed, not when
// Redis answers.
func TestSlowRedisFailsOpenAtTheBound(t *testing.T) {
	srv := redistest.Start(t)
	q := New(Options{ReplicaID: "r0", Order: NewRedisOrder(orderClient(t, srv), "b:"),
		StepTimeout: redisconn.RoundTripCall(50 * time.Millisecond), FailOpen: true})
	ready := func() (bool, time.Duration, Pace) { return true, 0, Pace{} }
	req := Request{Scope: "s", Tenant: "a", Weight: 1, MaxWait: 10 * time.Second}
	if r := q.Admit(context.Background(), req, ready); !r.Admitted { // warm the pool
		t.Fatalf("not admitted: %+v", r)
	}
	if err := srv.Client().ClientPause(context.Background(), time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := q.Admit(context.Background(), req, ready)
	if took := time.Since(start); !r.Admitted || took > 500*time.Millisecond {
		t.Fatalf("%+v after %s: want admitted from the replica's own order at the 50 ms bound", r, took)
	}
	time.Sleep(time.Second) // the pause ends with the test's server
}

// TestBurstJoinsTheSharedOrder: 2,000 requests arriving at once on one
// replica all join the shared order. With a 50 ms bound on the whole call,
// the ones still waiting for a pooled connection after 50 ms failed open
// into the replica's own order (773–914 of 2,000 in a test/swarm run),
// losing the order across replicas exactly in the burst it is for.
func TestBurstJoinsTheSharedOrder(t *testing.T) {
	const n = 2000
	srv := redistest.Start(t)
	order := NewRedisOrder(orderClient(t, srv), "burst:")
	q := New(Options{ReplicaID: "r0", Order: order, StepTimeout: redisconn.RoundTripCall(50 * time.Millisecond), FailOpen: true})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			q.Admit(ctx, Request{Scope: "s", Tenant: "a", Weight: 1, MaxWait: time.Minute}, never)
		}()
	}
	close(start)
	waitFor(t, func() bool { return q.Waiting() == n })
	d, err := order.Depth(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	down := q.orderDownUntil.Load() != 0
	cancel()
	wg.Wait()
	if d != n || down {
		t.Fatalf("%d of %d requests joined the shared order (failed over to the replica's own: %v)", d, n, down)
	}
}
