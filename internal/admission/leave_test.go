package admission

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// slowLeaves is a shared order whose single leaves all time out (a busy
// replica, many at once); only the batched retry gets through.
type slowLeaves struct{ *RedisOrder }

func (slowLeaves) Leave(context.Context, *Ticket) error { return context.DeadlineExceeded }

// TestFailedLeavesRetried: waiters whose leave failed when their clients
// went away still leave the shared order, in the background, so they hold
// nobody back until their deadline.
func TestFailedLeavesRetried(t *testing.T) {
	const n = 40
	order := slowLeaves{NewRedisOrder(redistest.Start(t).Client(), "l:")}
	q := New(Options{ReplicaID: "r0", Order: order, Poll: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := q.Admit(ctx, Request{Scope: "s", Tenant: "a", Weight: 1, MaxWait: time.Minute}, never); r.Reason != ReasonCancelled {
				t.Errorf("got %+v, want cancelled", r)
			}
		}()
	}
	waitFor(t, func() bool { return q.Waiting() == n })
	if d, _ := order.Depth(context.Background(), "s"); d != n {
		t.Fatalf("shared order holds %d tickets, want %d", d, n)
	}
	cancel()
	wg.Wait()
	waitFor(t, func() bool { d, _ := order.Depth(context.Background(), "s"); return d == 0 })
	waitFor(t, func() bool {
		q.leaves.mu.Lock()
		defer q.leaves.mu.Unlock()
		return !q.leaves.running && len(q.leaves.pending) == 0
	})
}

// TestLeaveRetriesEnd: a leave that keeps failing is retried until its
// ticket is past its deadline and the grace, then dropped.
func TestLeaveRetriesEnd(t *testing.T) {
	q := New(Options{ReplicaID: "r0"})
	now := time.Now()
	cases := []struct {
		name     string
		deadline time.Time
		retried  bool
	}{
		{"waiting", now.Add(time.Minute), true},
		{"just expired", now.Add(-time.Second), true},
		{"past the grace", now.Add(-leaveGrace - time.Second), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			failed := q.leaveAll([]pendingLeave{{order: failingOrder{}, t: Ticket{ID: "x", Scope: "s", Deadline: c.deadline}}})
			if got := len(failed) == 1; got != c.retried {
				t.Fatalf("retried %v, want %v", got, c.retried)
			}
		})
	}
}

// TestRedisOrderLeaveAll: one pipeline takes tickets of several scopes
// out and refunds their tenants like Leave.
func TestRedisOrderLeaveAll(t *testing.T) {
	srv := redistest.Start(t)
	batch, single := NewRedisOrder(srv.Client(), "b:"), NewRedisOrder(srv.Client(), "s:")
	var ts []Ticket
	for i, scope := range []string{"x", "x", "y"} {
		tk := Ticket{ID: string(rune('a' + i)), Scope: scope, Tenant: "t", Weight: 1, Deadline: time.Now().Add(time.Minute)}
		for _, o := range []*RedisOrder{batch, single} {
			if _, err := o.Step(context.Background(), &tk, nil, Pace{}, false); err != nil {
				t.Fatal(err)
			}
		}
		ts = append(ts, tk)
	}
	if err := batch.LeaveAll(context.Background(), ts); err != nil {
		t.Fatal(err)
	}
	for _, tk := range ts {
		if err := single.Leave(context.Background(), &tk); err != nil {
			t.Fatal(err)
		}
	}
	rdb := srv.Client()
	for _, scope := range []string{"x", "y"} {
		if d, _ := batch.Depth(context.Background(), scope); d != 0 {
			t.Errorf("scope %s: %d tickets left", scope, d)
		}
		got, err := rdb.HGetAll(context.Background(), batch.keys(scope)[2]).Result()
		if err != nil {
			t.Fatal(err)
		}
		want, err := rdb.HGetAll(context.Background(), single.keys(scope)[2]).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || got["f:t"] != want["f:t"] {
			t.Errorf("scope %s: state %v after LeaveAll, %v after Leave", scope, got, want)
		}
	}
}
