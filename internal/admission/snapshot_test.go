package admission

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
)

// waitIn starts a request that waits in q (capacity never returns within
// its minute) and returns once it is in the local queue.
func waitIn(t *testing.T, ctx context.Context, q *Queue, req Request) <-chan Result {
	t.Helper()
	queued, done := make(chan struct{}), make(chan Result, 1)
	req.Weight, req.MaxWait, req.OnWait = 1, time.Minute, func() { close(queued) }
	go func() { done <- q.Admit(ctx, req, never) }()
	select {
	case <-queued:
	case r := <-done:
		t.Fatalf("%+v never waited: %+v", req, r)
	}
	return done
}

func TestQueueSnapshot(t *testing.T) {
	bulk, planner := Request{Class: 2, ClassName: "bulk"}, Request{Class: 0, ClassName: "planner"}
	with := func(r Request, scope, tenant string) Request { r.Scope, r.Tenant = scope, tenant; return r }
	cases := []struct {
		name    string
		waiters []Request
		want    []ScopeSnapshot // OldestWait checked apart
	}{
		{name: "nobody waits", want: []ScopeSnapshot{}},
		{
			name:    "one scope, one tenant",
			waiters: []Request{with(bulk, "relay-a", "red"), with(bulk, "relay-a", "red")},
			want: []ScopeSnapshot{{Scope: "relay-a", Depth: 2, Waiters: []Waiters{
				{Tenant: "red", Class: 2, ClassName: "bulk", Count: 2}}}},
		},
		{
			name: "two scopes, two classes, two tenants",
			waiters: []Request{
				with(bulk, "relay-a,relay-b", "red"), with(planner, "relay-a,relay-b", "red"),
				with(bulk, "relay-a,relay-b", "blue"), with(bulk, "relay-a,relay-b", "red"),
				with(planner, "tpm:tenant:red", "red"),
			},
			want: []ScopeSnapshot{
				{Scope: "relay-a,relay-b", Depth: 4, Waiters: []Waiters{
					{Tenant: "blue", Class: 2, ClassName: "bulk", Count: 1},
					{Tenant: "red", Class: 0, ClassName: "planner", Count: 1},
					{Tenant: "red", Class: 2, ClassName: "bulk", Count: 2},
				}},
				{Scope: "tpm:tenant:red", Depth: 1, Waiters: []Waiters{
					{Tenant: "red", Class: 0, ClassName: "planner", Count: 1}}},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := New(Options{ReplicaID: "r0", MaxQueue: 16})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// Each scope's oldest wait lies between the moment its first
			// request was sent and the moment that request was queued.
			asked, queued := map[string]time.Time{}, map[string]time.Time{}
			var dones []<-chan Result
			for _, r := range c.waiters {
				before := time.Now()
				dones = append(dones, waitIn(t, ctx, q, r))
				if _, ok := asked[r.Scope]; !ok {
					asked[r.Scope], queued[r.Scope] = before, time.Now()
				}
			}
			now := time.Now()
			snap := q.snapshot(now)
			if snap.Waiting != len(c.waiters) || snap.MaxQueue != 16 {
				t.Errorf("waiting %d of %d, want %d of 16", snap.Waiting, snap.MaxQueue, len(c.waiters))
			}
			for i, s := range snap.Scopes {
				if lo, hi := now.Sub(queued[s.Scope]), now.Sub(asked[s.Scope]); s.OldestWait < lo || s.OldestWait > hi {
					t.Errorf("%s: oldest wait %v, want within [%v, %v]", s.Scope, s.OldestWait, lo, hi)
				}
				snap.Scopes[i].OldestWait = 0
			}
			if !reflect.DeepEqual(snap.Scopes, c.want) {
				t.Errorf("scopes\n got %+v\nwant %+v", snap.Scopes, c.want)
			}
			cancel()
			for _, d := range dones {
				<-d
			}
			if after := q.Snapshot(); after.Waiting != 0 || len(after.Scopes) != 0 || after.Counters.Cancelled != uint64(len(c.waiters)) {
				t.Errorf("after every client left: %+v", after)
			}
		})
	}
}

// failingOrder is a shared order that is always unreachable.
type failingOrder struct{}

var errOrderDown = errors.New("order down")

func (failingOrder) Step(context.Context, *Ticket, []*Ticket, Pace, bool) (Decision, error) {
	return Decision{}, errOrderDown
}
func (failingOrder) Leave(context.Context, *Ticket) error         { return errOrderDown }
func (failingOrder) Depth(context.Context, string) (int64, error) { return 0, errOrderDown }

// TestQueueSnapshotCounters: each way a request ends is counted once, in
// its own counter.
func TestQueueSnapshotCounters(t *testing.T) {
	req := Request{Scope: "s", Tenant: "red", Weight: 1, MaxWait: time.Minute}
	cases := []struct {
		name string
		opts Options
		run  func(t *testing.T, q *Queue)
		want Counters
	}{
		{"admitted after a wait", Options{Poll: time.Millisecond}, func(t *testing.T, q *Queue) {
			var mu sync.Mutex
			waited := false
			r := req
			r.OnWait = func() { mu.Lock(); waited = true; mu.Unlock() }
			capacity := func() (bool, time.Duration, Pace) { mu.Lock(); defer mu.Unlock(); return waited, 0, Pace{} }
			if res := q.Admit(context.Background(), r, capacity); !res.Admitted {
				t.Fatalf("not admitted: %+v", res)
			}
		}, Counters{AdmittedAfterWait: 1}},
		{"admitted at once is no wait", Options{}, func(t *testing.T, q *Queue) {
			q.Admit(context.Background(), req, func() (bool, time.Duration, Pace) { return true, 0, Pace{} })
		}, Counters{}},
		{"timed out", Options{}, func(t *testing.T, q *Queue) {
			r := req
			r.MaxWait = 20 * time.Millisecond
			q.Admit(context.Background(), r, func() (bool, time.Duration, Pace) { return false, 10 * time.Millisecond, Pace{} })
		}, Counters{TimedOut: 1}},
		{"too long", Options{}, func(t *testing.T, q *Queue) {
			q.Admit(context.Background(), req, func() (bool, time.Duration, Pace) { return false, time.Hour, Pace{} })
		}, Counters{TooLong: 1}},
		{"full", Options{MaxQueue: 1}, func(t *testing.T, q *Queue) {
			ctx, cancel := context.WithCancel(context.Background())
			done := waitIn(t, ctx, q, req)
			q.Admit(context.Background(), req, never)
			cancel()
			<-done
		}, Counters{Full: 1, Cancelled: 1}},
		{"order down, failing closed", Options{Order: failingOrder{}}, func(t *testing.T, q *Queue) {
			q.Admit(context.Background(), req, never)
		}, Counters{OrderDown: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.opts.ReplicaID = "r0"
			q := New(c.opts)
			c.run(t, q)
			if got := q.Snapshot().Counters; got != c.want {
				t.Errorf("counters %+v, want %+v", got, c.want)
			}
		})
	}
}
