package admission

import (
	"context"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redisconn"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// TestSlowRedisFailsOpenAtTheBound: with the shared order on a Redis that
// answers late (paused 1 s), a request failing open goes on in the
// replica's own order once StepTimeout has passed, not when Redis answers:
// the gateway's order client is redisconn.Bounded.
func TestSlowRedisFailsOpenAtTheBound(t *testing.T) {
	srv := redistest.Start(t)
	rdb, err := redisconn.New(config.Redis{Addrs: []string{srv.Addr}, DialTimeout: config.Duration{Duration: time.Second},
		ReadTimeout: config.Duration{Duration: 3 * time.Second}}, redisconn.Bounded())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	q := New(Options{ReplicaID: "r0", Order: NewRedisOrder(rdb, "b:"), StepTimeout: 50 * time.Millisecond, FailOpen: true})
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
