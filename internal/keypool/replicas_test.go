package keypool

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// TestReplicasCounted: the replicas that pick keys count themselves in
// Redis, and a replica's share of what a key has left follows the count:
// half until three pick (also with none counted yet), a third with three,
// half again once one of them stops. A replica that never picks (a control
// plane running the pools for EDS health) is not counted.
func TestReplicasCounted(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, paceYAML+"breaker: {sync_interval: 100ms}\n", map[string][]key{"b": {{id: "a"}}})
	ps := make([]*Pools, 4)
	stop := make([]func(), len(ps))
	for i := range ps {
		ps[i] = newPools(t, cfg, Options{Redis: srv.Client(), ReplicaID: fmt.Sprintf("r%d", i)})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = ps[i].Run(ctx); close(done) }()
		stop[i] = func() { cancel(); <-done }
		t.Cleanup(stop[i])
	}
	// Two polls with nothing picked: nobody counted, the default half.
	time.Sleep(250 * time.Millisecond)
	if got := ps[0].replicas(); got != 2 {
		t.Fatalf("before any pick: share 1/%d, want 1/2", got)
	}
	// Replicas 0-2 pick; replica 3 (the control plane) never does.
	for _, p := range ps[:3] {
		pick(t, p, "b", PickRequest{Attempt: 1}).Done(status(200))
	}
	for i, p := range ps {
		waitFor(t, 3*time.Second, fmt.Sprintf("replica %d counting three pickers", i), func() bool { return p.replicas() == 3 })
	}
	stop[2]()
	waitFor(t, 3*time.Second, "replica 0 counting two pickers after one stopped", func() bool { return ps[0].replicas() == 2 })
}
