package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// TestOrderStepAdmitsNext: an admitted ticket's step admits the tickets
// passed after it, in turn, while each is first in the order and the
// pace allows; the first that is not ends the run.
func TestOrderStepAdmitsNext(t *testing.T) {
	for name, mk := range orders(t) {
		for _, tc := range []struct {
			name     string
			pace     Pace
			other    bool // another replica's ticket joins between a and b
			leaveC   bool
			wantNext int
			left     int64
		}{
			{"unpaced: all", Pace{}, false, false, 3, 0},
			{"pace burst 2: a and b", Pace{Rate: 0.001, Burst: 2}, false, false, 1, 2},
			{"c left: stops at c", Pace{}, false, true, 1, 1},
			{"another replica's ticket first: none", Pace{}, true, false, 0, 4},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				o, ctx := mk(), context.Background()
				a, b, c, d := ticket("a", "x", 1, 0), ticket("b", "x", 1, 0), ticket("c", "x", 1, 0), ticket("d", "x", 1, 0)
				joined := []*Ticket{a}
				if tc.other {
					joined = append(joined, ticket("o", "y", 1, 0))
				}
				joined = append(joined, b, c, d)
				for _, tk := range joined {
					if _, err := o.Step(ctx, tk, nil, tc.pace, false); err != nil {
						t.Fatal(err)
					}
				}
				if tc.leaveC {
					if err := o.Leave(ctx, c); err != nil {
						t.Fatal(err)
					}
				}
				got, err := o.Step(ctx, a, []*Ticket{b, c, d}, tc.pace, true)
				if err != nil || !got.Admitted || got.Next != tc.wantNext {
					t.Fatalf("step: %+v %v, want admitted with %d next", got, err, tc.wantNext)
				}
				if n, _ := o.Depth(ctx, "pool"); n != tc.left {
					t.Fatalf("depth %d, want %d", n, tc.left)
				}
			})
		}
	}
}

// countingOrder counts the steps that reach the order.
type countingOrder struct {
	Order
	steps atomic.Int64
}

func (o *countingOrder) Step(ctx context.Context, t *Ticket, next []*Ticket, p Pace, ready bool) (Decision, error) {
	o.steps.Add(1)
	return o.Order.Step(ctx, t, next, p, ready)
}

// TestQueueDrainsBurstInBatches: a burst queued on one replica while its
// keys are out is admitted, once they are back, in steps of up to
// maxNext+1 requests, not one shared-order round trip per request (2,000
// requests held on a cold key drained slower than their maximum wait on a
// loaded box that way). Every request is admitted once and no ticket is
// left in the order.
func TestQueueDrainsBurstInBatches(t *testing.T) {
	srv := redistest.Start(t)
	const n = 300
	o := &countingOrder{Order: NewRedisOrder(srv.Client(), "drain:")}
	q := New(Options{ReplicaID: "r", Order: o, StepTimeout: 5 * time.Second})
	var ready atomic.Bool
	capacity := func() (bool, time.Duration, Pace) {
		if ready.Load() {
			return true, 0, Pace{}
		}
		return false, 20 * time.Millisecond, Pace{}
	}
	admitted, wait := queueAll(t, q, n, capacity)
	before := o.steps.Load()
	ready.Store(true)
	wait()
	steps := o.steps.Load() - before
	t.Logf("%d queued requests admitted in %d order steps", admitted.Load(), steps)
	if admitted.Load() != n {
		t.Fatalf("admitted %d of %d", admitted.Load(), n)
	}
	if limit := int64(n / 10); steps > limit {
		t.Fatalf("%d steps to admit %d queued requests, want at most %d", steps, n, limit)
	}
	if d, _ := o.Depth(context.Background(), "s"); d != 0 {
		t.Fatalf("%d tickets left in the order", d)
	}
	if q.Waiting() != 0 {
		t.Fatalf("%d still waiting", q.Waiting())
	}
}

// TestQueueBatchesUnderChurn: three replicas share one order while their
// keys come and go; requests time out, are cancelled, or are admitted, some
// in another waiter's step. Each gets exactly one answer, the replicas end
// with nobody waiting and the order with no ticket.
func TestQueueBatchesUnderChurn(t *testing.T) {
	srv := redistest.Start(t)
	var ready atomic.Bool
	capacity := func() (bool, time.Duration, Pace) {
		if ready.Load() {
			return true, 0, Pace{Rate: 2000, Burst: 8}
		}
		return false, 5 * time.Millisecond, Pace{Rate: 2000, Burst: 8}
	}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
				ready.Store(!ready.Load())
			}
		}
	}()
	defer close(stop)
	var qs []*Queue
	for r := range 3 {
		qs = append(qs, New(Options{ReplicaID: fmt.Sprintf("r%d", r), Order: NewRedisOrder(srv.Client(), "churn:"),
			Poll: 2 * time.Millisecond, StepTimeout: 5 * time.Second}))
	}
	const perReplica = 200
	var admitted, refused, answers atomic.Int64
	var wg sync.WaitGroup
	for r, q := range qs {
		for i := range perReplica {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if i%7 == 0 {
					time.AfterFunc(time.Duration(i%5)*time.Millisecond, cancel)
				}
				wait := 2 * time.Second
				if i%5 == 0 {
					wait = 10 * time.Millisecond
				}
				res := q.Admit(ctx, Request{Scope: "s", Tenant: fmt.Sprintf("t%d", (r+i)%2), Weight: 1, MaxWait: wait}, capacity)
				answers.Add(1)
				if res.Admitted {
					admitted.Add(1)
				} else {
					refused.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d admitted, %d refused (timed out or cancelled)", admitted.Load(), refused.Load())
	if answers.Load() != 3*perReplica || admitted.Load() == 0 {
		t.Fatalf("%d answers for %d requests, %d admitted", answers.Load(), 3*perReplica, admitted.Load())
	}
	for r, q := range qs {
		if n := q.Waiting(); n != 0 {
			t.Errorf("replica %d: %d still waiting", r, n)
		}
	}
	waitFor(t, func() bool {
		n, _ := NewRedisOrder(srv.Client(), "churn:").Depth(context.Background(), "s")
		return n == 0
	})
}

// TestBatchSkipsNewSessions: the first waiter's step carries the waiters
// after it in order, but not a session's first call (the session bound
// gates it in its own step) nor one already in a step.
func TestBatchSkipsNewSessions(t *testing.T) {
	q := New(Options{})
	var ws []*waiter
	for i := range 4 {
		w := &waiter{req: Request{Scope: "s"}, tag: float64(i + 1), turn: make(chan struct{}), granted: make(chan struct{})}
		w.t.ID = fmt.Sprintf("w%d", i)
		if _, ok := q.enqueue(w); !ok {
			t.Fatal("enqueue refused")
		}
		ws = append(ws, w)
	}
	ws[1].req.newSession = true
	ws[3].claimed = true
	batch, ok := q.beginStep(ws[0], true)
	if !ok || len(batch) != 1 || batch[0] != ws[2] {
		t.Fatalf("batch %v (ok %v), want only w2", batch, ok)
	}
	if _, ok := q.beginStep(ws[2], true); ok {
		t.Fatal("a waiter in another's step stepped itself")
	}
	q.endStep(ws[0], batch, Decision{Admitted: true, Next: 1})
	select {
	case <-ws[2].granted:
	default:
		t.Fatal("w2 admitted with the first was not told")
	}
	if q.Waiting() != 3 {
		t.Fatalf("%d waiting, want 3 (w2 left the heap)", q.Waiting())
	}
}

// flakyOrder is a shared order whose steps fail while down is set.
type flakyOrder struct {
	Order
	down atomic.Bool
}

func (o *flakyOrder) Step(ctx context.Context, t *Ticket, next []*Ticket, p Pace, ready bool) (Decision, error) {
	if o.down.Load() {
		return Decision{}, errors.New("down")
	}
	return o.Order.Step(ctx, t, next, p, ready)
}

// TestFailOpenLeavesSharedOrder: requests that joined the shared order and
// are then admitted through the replica's own order (the shared one failed
// meanwhile, failing open) take their tickets out of the shared order;
// left there, they held the first places until their deadlines and, with
// the lead, nobody behind them was admitted.
func TestFailOpenLeavesSharedOrder(t *testing.T) {
	srv := redistest.Start(t)
	redisOrder := NewRedisOrder(srv.Client(), "failopen:")
	o := &flakyOrder{Order: redisOrder}
	q := New(Options{ReplicaID: "r", Order: o, FailOpen: true, StepTimeout: 5 * time.Second, Poll: 5 * time.Millisecond})
	var ready atomic.Bool
	capacity := func() (bool, time.Duration, Pace) { return ready.Load(), 10 * time.Millisecond, Pace{} }
	const n = 40
	admitted, wait := queueAll(t, q, n, capacity)
	if d, _ := redisOrder.Depth(context.Background(), "s"); d != n {
		t.Fatalf("%d tickets in the shared order, want %d", d, n)
	}
	o.down.Store(true)
	ready.Store(true)
	wait()
	o.down.Store(false)
	if admitted.Load() != n {
		t.Fatalf("admitted %d of %d through the local order", admitted.Load(), n)
	}
	waitFor(t, func() bool {
		d, _ := redisOrder.Depth(context.Background(), "s")
		return d == 0
	})
}

// TestFailOpenWaitersDrainBesideShared: requests that went on in the
// replica's own order while the shared one failed keep draining at their
// pace after it returns, even when a later request waits in the shared
// order and cannot be admitted there. In one heap, that request's tag
// (from the shared order's clock) put it first, the replica's own waiters
// were never given the turn and asked only at the 1 s backstop.
func TestFailOpenWaitersDrainBesideShared(t *testing.T) {
	o := &flakyOrder{Order: NewLocalOrder()}
	// Another replica's request holds the shared order's first place.
	other := Ticket{ID: "other-1", Scope: "s", Tenant: "t", Weight: 1, Deadline: time.Now().Add(time.Minute)}
	if d, err := o.Step(context.Background(), &other, nil, Pace{}, false); err != nil || !d.Joined {
		t.Fatalf("other replica's ticket: %+v, %v", d, err)
	}
	q := New(Options{ReplicaID: "r", Order: o, FailOpen: true, Poll: 5 * time.Millisecond, Lead: -1})
	capacity := func() (bool, time.Duration, Pace) { return true, 0, Pace{Rate: 10, Burst: 1} }

	// The shared order fails while 30 requests arrive: they wait in the
	// replica's own order, paced at 10/s (3 s for all).
	o.down.Store(true)
	const n = 30
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			res := q.Admit(context.Background(), Request{Scope: "s", Tenant: "u", Weight: 0.01, MaxWait: 6 * time.Second}, capacity)
			if res.Admitted {
				admitted.Add(1)
			} else {
				refused.Add(1)
			}
		})
	}
	waitFor(t, func() bool { return q.Waiting()+int(admitted.Load()) == n })
	o.down.Store(false)
	// Past orderDownFor the replica asks the shared order again: a new
	// request joins it behind the other replica's and waits there.
	time.Sleep(orderDownFor + 100*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	blocked := make(chan Result, 1)
	go func() {
		blocked <- q.Admit(ctx, Request{Scope: "s", Tenant: "t", Weight: 1, MaxWait: time.Minute}, capacity)
	}()
	wg.Wait()
	cancel()
	if res := <-blocked; res.Admitted {
		t.Errorf("the request behind the other replica's was admitted: %+v", res)
	}
	if admitted.Load() != n {
		t.Fatalf("%d of %d admitted through the replica's own order (%d refused)", admitted.Load(), n, refused.Load())
	}
}

// queueAll sends n requests of one tenant to q (a minute's wait each) and
// returns once all of them wait; wait blocks until every one is answered,
// and admitted counts those admitted.
func queueAll(t *testing.T, q *Queue, n int, capacity Capacity) (admitted *atomic.Int64, wait func()) {
	t.Helper()
	admitted = new(atomic.Int64)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if res := q.Admit(context.Background(), Request{Scope: "s", Tenant: "a", Weight: 1, MaxWait: time.Minute}, capacity); res.Admitted {
				admitted.Add(1)
			}
		})
	}
	waitFor(t, func() bool { return q.Waiting() == n })
	return admitted, wg.Wait
}
