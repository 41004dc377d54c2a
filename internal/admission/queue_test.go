package admission

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

func never() (bool, time.Duration, Pace) { return false, 50 * time.Millisecond, Pace{} }

func TestQueueCancelFreesPlaceAtOnce(t *testing.T) {
	q := New(Options{ReplicaID: "r0", Order: NewRedisOrder(redistest.Start(t).Client(), "c:")})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Result)
	go func() { done <- q.Admit(ctx, Request{Scope: "s", Tenant: "a", Weight: 1, MaxWait: time.Minute}, never) }()
	waitFor(t, func() bool { return q.Waiting() == 1 })
	cancel()
	r := <-done
	if r.Admitted || r.Reason != ReasonCancelled {
		t.Fatalf("got %+v", r)
	}
	if q.Waiting() != 0 {
		t.Fatal("still counted as waiting")
	}
	if n, _ := q.opts.Order.Depth(context.Background(), "s"); n != 0 {
		t.Fatalf("the shared order still holds %d tickets", n)
	}
}

func TestQueueTimeoutAndRefusals(t *testing.T) {
	q := New(Options{ReplicaID: "r0", MaxQueue: 1})
	// Capacity returns after the maximum wait: refused at once with it.
	r := q.Admit(context.Background(), Request{Scope: "s", Tenant: "a", Weight: 1, MaxWait: 10 * time.Millisecond},
		func() (bool, time.Duration, Pace) { return false, 3 * time.Second, Pace{} })
	if r.Reason != ReasonTooLong || r.RetryAfter != 3*time.Second {
		t.Fatalf("too long: %+v", r)
	}
	// Waits its maximum, then leaves with a Retry-After of at least 1s.
	r = q.Admit(context.Background(), Request{Scope: "s", Tenant: "a", Weight: 1, MaxWait: 80 * time.Millisecond}, never)
	if r.Reason != ReasonTimeout || r.RetryAfter < time.Second || r.Waited < 80*time.Millisecond {
		t.Fatalf("timeout: %+v", r)
	}
	// Queue full.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Admit(ctx, Request{Scope: "s", Tenant: "a", Weight: 1, MaxWait: time.Minute}, never)
	waitFor(t, func() bool { return q.Waiting() == 1 })
	r = q.Admit(context.Background(), Request{Scope: "s", Tenant: "b", Weight: 1, MaxWait: time.Minute}, never)
	if r.Reason != ReasonFull {
		t.Fatalf("full: %+v", r)
	}
}

// TestFairnessAcrossReplicas: three replicas (each its own Queue and Redis
// client) admit two backlogged tenants, weights 3:1, through one paced
// scope; the shares stay within 5 % of the weights and no ticket is left.
func TestFairnessAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	pace := func() (bool, time.Duration, Pace) { return true, 0, Pace{Rate: 400, Burst: 1} }
	var counts [2]atomic.Int64
	const total = 600
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for r := range 3 {
		// The step timeout is generous: this test is about the order, and
		// a -race run beside other packages on 2 cores can take a Redis
		// round trip past the 50 ms default (the fail-open path has its
		// own tests).
		q := New(Options{ReplicaID: fmt.Sprintf("r%d", r), Order: NewRedisOrder(srv.Client(), "f:"), Poll: 5 * time.Millisecond,
			StepTimeout: 5 * time.Second})
		for ti, tenant := range []string{"a", "b"} {
			w := []float64{3, 1}[ti]
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						res := q.Admit(ctx, Request{Scope: "s", Tenant: tenant, Weight: w, MaxWait: 10 * time.Second}, pace)
						if !res.Admitted && ctx.Err() == nil {
							t.Errorf("not admitted: %+v", res)
						}
						if res.Admitted && counts[0].Load()+counts[1].Load() < total {
							counts[ti].Add(1)
						}
					}
				}()
			}
		}
	}
	waitFor(t, func() bool { return counts[0].Load()+counts[1].Load() >= total })
	cancel()
	wg.Wait()
	a, b := float64(counts[0].Load()), float64(counts[1].Load())
	share := a / (a + b)
	t.Logf("tenant a (weight 3) %.0f, b (weight 1) %.0f: share %.3f (want 0.75)", a, b, share)
	if share < 0.75*0.95 || share > 0.75*1.05 {
		t.Fatalf("share of a %.3f not within 5%% of 0.75", share)
	}
	if n, _ := NewRedisOrder(srv.Client(), "f:").Depth(context.Background(), "s"); n != 0 {
		t.Fatalf("%d tickets left in the order after every waiter ended", n)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestQueueBurstFloor: a paced scope admits at least Options.Burst back to
// back (default Lead+1); an unpaced one is left alone.
func TestQueueBurstFloor(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		in   Pace
		want int
	}{
		{"default: lead 3, burst 4", Options{}, Pace{Rate: 10, Burst: 1}, 4},
		{"lead 0 (-1): burst 1", Options{Lead: -1}, Pace{Rate: 10, Burst: 1}, 1},
		{"higher burst kept", Options{}, Pace{Rate: 10, Burst: 9}, 9},
		{"explicit burst", Options{Burst: 2}, Pace{Rate: 10, Burst: 1}, 2},
		{"unpaced", Options{}, Pace{Burst: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New(tc.opts)
			_, _, p := q.capacity(func() (bool, time.Duration, Pace) { return true, 0, tc.in })
			if p.Burst != tc.want {
				t.Errorf("burst %d, want %d", p.Burst, tc.want)
			}
		})
	}
}

func TestPollInterval(t *testing.T) {
	q := New(Options{Poll: 20 * time.Millisecond})
	for _, c := range []struct {
		name string
		head bool
		last stepState
		want time.Duration
	}{
		{"behind the first: backstop only", false, stepState{d: Decision{Wait: 5 * time.Millisecond}}, time.Second},
		{"first: every poll", true, stepState{ready: true}, 20 * time.Millisecond},
		{"first, pace due sooner", true, stepState{d: Decision{Wait: 5 * time.Millisecond}}, 5 * time.Millisecond},
		{"first, pace due later", true, stepState{d: Decision{Wait: 50 * time.Millisecond}}, 20 * time.Millisecond},
		{"first, keys back sooner", true, stepState{ra: 3 * time.Millisecond}, 3 * time.Millisecond},
		{"first, keys ready: their retry-after does not count", true, stepState{ready: true, ra: 3 * time.Millisecond}, 20 * time.Millisecond},
		{"first, pace before keys", true, stepState{d: Decision{Wait: 7 * time.Millisecond}, ra: 3 * time.Millisecond}, 7 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := q.pollInterval(c.head, &c.last); got != c.want {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestTimeoutRetry(t *testing.T) {
	for _, c := range []struct {
		name string
		last stepState
		want time.Duration
	}{
		{"keys' retry-after", stepState{ra: 2 * time.Second}, 2 * time.Second},
		{"place in a paced order", stepState{d: Decision{Ahead: 19}, pace: Pace{Rate: 10}}, 2 * time.Second},
		{"keys later than the place", stepState{ra: 3 * time.Second, d: Decision{Ahead: 4}, pace: Pace{Rate: 10}}, 3 * time.Second},
		{"pace's next slot later still", stepState{ra: time.Second, d: Decision{Wait: 4 * time.Second}}, 4 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.last.timeoutRetry(); got != c.want {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

// slowOrder is a shared order whose steps time out.
type slowOrder struct {
	steps, leaves atomic.Int64
}

func (o *slowOrder) Step(ctx context.Context, _ *Ticket, _ []*Ticket, _ Pace, _ bool) (Decision, error) {
	o.steps.Add(1)
	<-ctx.Done()
	return Decision{}, ctx.Err()
}

func (o *slowOrder) Leave(context.Context, *Ticket) error { o.leaves.Add(1); return nil }

func (o *slowOrder) Depth(context.Context, string) (int64, error) { return 0, nil }

// TestOrderDownKeepsLocalOrder: failing open, a step of the shared order
// that times out sends the replica to its own order for orderDownFor, so
// the requests behind it do not each wait out a step timeout first; the
// timed-out ticket is taken out of the shared order.
func TestOrderDownKeepsLocalOrder(t *testing.T) {
	shared := &slowOrder{}
	q := New(Options{ReplicaID: "r0", Order: shared, FailOpen: true, StepTimeout: 20 * time.Millisecond})
	ready := func() (bool, time.Duration, Pace) { return true, 0, Pace{} }
	for i := range 20 {
		if r := q.Admit(context.Background(), Request{Scope: "s", Tenant: "a", Weight: 1, MaxWait: time.Second}, ready); !r.Admitted {
			t.Fatalf("request %d: %+v, want admitted by the local order", i, r)
		}
	}
	if n := shared.steps.Load(); n != 1 {
		t.Fatalf("%d steps reached the shared order, want 1 (then the local order for %s)", n, orderDownFor)
	}
	waitFor(t, func() bool { return shared.leaves.Load() == 1 })

	// After orderDownFor the shared order is asked again.
	q.orderDownUntil.Store(time.Now().UnixNano())
	q.Admit(context.Background(), Request{Scope: "s", Tenant: "a", Weight: 1, MaxWait: time.Second}, ready)
	if n := shared.steps.Load(); n != 2 {
		t.Fatalf("%d steps reached the shared order after the down period, want 2", n)
	}
}

// TestCancelledDuringAStep: a client that leaves while its order step is
// under way (waiting for a pooled connection in a burst) is counted as
// cancelled, not as the order failing, and its ticket leaves.
func TestCancelledDuringAStep(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail open %v", failOpen), func(t *testing.T) {
			shared := &slowOrder{}
			q := New(Options{ReplicaID: "r0", Order: shared, FailOpen: failOpen, StepTimeout: time.Minute})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan Result)
			go func() {
				done <- q.Admit(ctx, Request{Scope: "s", Tenant: "a", Weight: 1, MaxWait: time.Minute}, never)
			}()
			waitFor(t, func() bool { return shared.steps.Load() == 1 })
			cancel()
			r := <-done
			c := q.Snapshot().Counters
			if r.Reason != ReasonCancelled || c.Cancelled != 1 || c.OrderDown != 0 {
				t.Fatalf("got %+v, counters %+v: want cancelled", r, c)
			}
			if shared.leaves.Load() != 1 {
				t.Fatalf("%d leaves, want 1", shared.leaves.Load())
			}
			if q.orderDownUntil.Load() != 0 {
				t.Fatal("a cancelled step marked the order down")
			}
		})
	}
}

// lateOrder is a shared order whose steps run but answer too late: the
// client stopped waiting (the step's timeout) after Redis ran the step.
type lateOrder struct{ Order }

func (o lateOrder) Step(_ context.Context, t *Ticket, next []*Ticket, p Pace, ready bool) (Decision, error) {
	_, _ = o.Order.Step(context.Background(), t, next, p, ready)
	return Decision{}, context.DeadlineExceeded
}

// TestFailClosedStepLeaves: failing closed, a first step that failed after
// Redis ran it (the ticket joined) takes the ticket out of the shared
// order. Left there, it stayed ahead of every replica's waiters until its
// deadline; four such at the front and nobody was admitted.
func TestFailClosedStepLeaves(t *testing.T) {
	shared := NewRedisOrder(redistest.Start(t).Client(), "closed:")
	q := New(Options{ReplicaID: "r0", Order: lateOrder{shared}})
	r := q.Admit(context.Background(), Request{Scope: "s", Tenant: "a", Weight: 1, MaxWait: time.Minute}, never)
	if r.Reason != ReasonOrderDown {
		t.Fatalf("got %+v, want order_down", r)
	}
	waitFor(t, func() bool {
		n, err := shared.Depth(context.Background(), "s")
		return err == nil && n == 0
	})
}

// TestTimeoutRetryAsOfNow: a waiter behind the first steps only when its
// wait begins; when its wait ends, its Retry-After is its place in the
// order as of now, with the keys as they are now, not as when it joined
// (extproc/admit takes the later of this and the keys' reopening, so a
// stale figure would stand).
func TestTimeoutRetryAsOfNow(t *testing.T) {
	q := New(Options{ReplicaID: "r0"})
	joined := time.Now().Add(-2 * time.Second)
	for _, c := range []struct {
		name     string
		last     stepState
		keys     Capacity
		min, max time.Duration
	}{
		{"keys open since", stepState{ra: 1900 * time.Millisecond, at: joined},
			func() (bool, time.Duration, Pace) { return true, 0, Pace{} }, 0, 0},
		{"keys out for longer now", stepState{ra: 500 * time.Millisecond, at: joined},
			func() (bool, time.Duration, Pace) { return false, 3 * time.Second, Pace{} }, 3 * time.Second, 3 * time.Second},
		{"place in a paced order, 2s on", stepState{d: Decision{Ahead: 29}, pace: Pace{Rate: 10}, at: joined},
			func() (bool, time.Duration, Pace) { return true, 0, Pace{} }, 900 * time.Millisecond, time.Second},
		{"pace's next slot, 2s on", stepState{d: Decision{Wait: 5 * time.Second}, at: joined},
			func() (bool, time.Duration, Pace) { return false, time.Second, Pace{} }, 2900 * time.Millisecond, 3 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := q.timedOut(c.keys, &c.last); got < c.min || got > c.max {
				t.Fatalf("got %v, want %v-%v", got, c.min, c.max)
			}
		})
	}
}
