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

// TestSessionStores: the local and the Redis store agree on what is under
// way, the bound, the Retry-After at the bound and the idle end.
func TestSessionStores(t *testing.T) {
	const idle = 300 * time.Millisecond
	stores := map[string]SessionStore{"local": NewLocalSessions(), "redis": NewRedisSessions(redistest.Start(t).Client(), "t:")}
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			steps := []struct {
				session         string
				bound           int
				sleep           time.Duration
				active, started bool
			}{
				{session: "a", bound: 2, started: true},
				{session: "a", bound: 2, active: true},
				{session: "b", bound: 2, started: true},
				{session: "c", bound: 2},                // at the bound
				{session: "c", bound: 0, started: true}, // no bound
				{session: "d", bound: 3},
				{session: "d", bound: 3, sleep: idle + 50*time.Millisecond, started: true}, // a, b, c ended
				{session: "a", bound: 3, started: true},
			}
			for i, s := range steps {
				time.Sleep(s.sleep)
				active, started, retry, err := st.Begin(ctx, "s", s.session, s.bound, idle)
				if err != nil {
					t.Fatal(err)
				}
				if active != s.active || started != s.started {
					t.Fatalf("step %d (%s): active %v started %v, want %v %v", i, s.session, active, started, s.active, s.started)
				}
				if !active && !started && (retry <= 0 || retry > idle) {
					t.Fatalf("step %d: Retry-After %s at the bound, want within the idle %s", i, retry, idle)
				}
			}
			if err := st.Touch(ctx, "s", "a", idle); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSessionsGoFirst: while capacity is short, the call of a session
// under way is admitted before a new session's call that waited longer,
// and a new session beyond the bound gets 429 with Retry-After when no
// session ends within its wait.
func TestSessionsGoFirst(t *testing.T) {
	var mu sync.Mutex
	ready := false
	capacity := func() (bool, time.Duration, Pace) {
		mu.Lock()
		defer mu.Unlock()
		return ready, 10 * time.Millisecond, Pace{}
	}
	// Lead -1: only the first of the order is admitted, so the test sees
	// the order and not which waiter polled first.
	q := New(Options{ReplicaID: "r0", Lead: -1, Sessions: NewLocalSessions(), SessionIdle: 5 * time.Second, MaxSessions: 2})
	ctx := context.Background()
	// Session "old" is under way: one call admitted.
	mu.Lock()
	ready = true
	mu.Unlock()
	if r := q.Admit(ctx, Request{Scope: "s", Tenant: "t", Weight: 1, MaxWait: time.Second, Session: "old"}, capacity); !r.Admitted {
		t.Fatalf("first call: %+v", r)
	}
	mu.Lock()
	ready = false
	mu.Unlock()
	var order []string
	var omu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range []string{"new", "old"} {
		wg.Go(func() {
			if r := q.Admit(ctx, Request{Scope: "s", Tenant: "t", Weight: 1, MaxWait: 5 * time.Second, Session: s}, capacity); r.Admitted {
				omu.Lock()
				order = append(order, s)
				omu.Unlock()
			}
		})
		waitFor(t, func() bool { return q.Waiting() >= 1 && s == "new" || q.Waiting() == 2 })
	}
	// Admit one at a time: the first admitted must be the old session's.
	mu.Lock()
	ready = true
	mu.Unlock()
	wg.Wait()
	if len(order) != 2 || order[0] != "old" {
		t.Fatalf("admitted in order %v, want old first", order)
	}
	// Two sessions under way (old, new): a third waits, then is refused
	// with the time until the oldest goes idle.
	r := q.Admit(ctx, Request{Scope: "s", Tenant: "t", Weight: 1, MaxWait: 200 * time.Millisecond, Session: "third"}, capacity)
	if r.Admitted || r.Reason != ReasonSessions || r.RetryAfter < 4*time.Second || r.RetryAfter > 5*time.Second {
		t.Fatalf("third session: %+v, want sessions_full with Retry-After ~5s", r)
	}
}

func TestSessionBound(t *testing.T) {
	for _, tc := range []struct {
		max  int
		span time.Duration
		rate float64
		want int
	}{
		{max: 7, span: 4 * time.Second, rate: 10, want: 7},
		{span: 4 * time.Second, rate: 5.5, want: 22},
		{span: 4 * time.Second, rate: 0.01, want: 1},
		{span: 4 * time.Second, rate: 0, want: 0},
		{rate: 10, want: 0},
	} {
		q := New(Options{MaxSessions: tc.max, SessionSpan: tc.span})
		if got := q.sessionBound(tc.rate); got != tc.want {
			t.Errorf("%+v: bound %d, want %d", tc, got, tc.want)
		}
	}
	if sessionClass(0, true) != 0 || sessionClass(0, false) != 1 || sessionClass(1, true) != 2 || sessionClass(1, false) != 3 {
		t.Error("classes: sessions under way first within each configured class, classes in their order")
	}
}

// TestNewSessionsWaitForBacklog: while a call of a session under way has
// waited more than sessionBacklog here, a new session's first call waits
// (it is not admitted) while a session under way is; once the backlog is
// gone, the new session is admitted.
func TestNewSessionsWaitForBacklog(t *testing.T) {
	st := NewLocalSessions()
	q := New(Options{ReplicaID: "r0", Sessions: st, SessionIdle: 5 * time.Second})
	ctx := context.Background()
	open := func() (bool, time.Duration, Pace) { return true, 0, Pace{} }
	if r := q.Admit(ctx, Request{Scope: "w", Tenant: "t", Weight: 1, MaxWait: time.Second, Session: "old"}, open); !r.Admitted {
		t.Fatalf("first call: %+v", r)
	}
	// A call of "old" waiting since before the backlog bound.
	w := &waiter{req: Request{Scope: "w", underWay: true}, turn: make(chan struct{}), since: time.Now().Add(-sessionBacklog - 300*time.Millisecond)}
	if _, ok := q.enqueue(w); !ok {
		t.Fatal("enqueue")
	}
	done := make(chan Result, 1)
	go func() {
		done <- q.Admit(ctx, Request{Scope: "p", Tenant: "t", Weight: 1, MaxWait: 20 * time.Second, Session: "new"}, open)
	}()
	waitFor(t, func() bool { return q.Waiting() == 2 })
	if r := q.Admit(ctx, Request{Scope: "p", Tenant: "t", Weight: 1, MaxWait: time.Second, Session: "old"}, open); !r.Admitted {
		t.Fatalf("session under way behind the backlog: %+v", r)
	}
	select {
	case r := <-done:
		t.Fatalf("new session admitted while the sessions under way are behind: %+v", r)
	default:
	}
	q.dequeue(w)
	if r := <-done; !r.Admitted {
		t.Fatalf("new session once the backlog is gone: %+v", r)
	}
}

// TestNewSessionRefusedIsForgotten: a new session whose first call is not
// admitted within its wait does not stay under way.
func TestNewSessionRefusedIsForgotten(t *testing.T) {
	st := NewLocalSessions()
	q := New(Options{ReplicaID: "r0", Sessions: st, SessionIdle: 5 * time.Second})
	closed := func() (bool, time.Duration, Pace) { return false, 50 * time.Millisecond, Pace{} }
	r := q.Admit(context.Background(), Request{Scope: "p", Tenant: "t", Weight: 1, MaxWait: 200 * time.Millisecond, Session: "s"}, closed)
	if r.Admitted {
		t.Fatalf("admitted without capacity: %+v", r)
	}
	st.mu.Lock()
	_, held := st.last["s"]
	st.mu.Unlock()
	if held {
		t.Fatal("the refused new session is still under way")
	}
}

// touchCounter is a session store that counts Touch calls.
type touchCounter struct {
	*LocalSessions
	touches atomic.Int64
}

func (s *touchCounter) Touch(ctx context.Context, scope, session string, idle time.Duration) error {
	s.touches.Add(1)
	return s.LocalSessions.Touch(ctx, scope, session, idle)
}

// TestTouchOnAdmission: a new session admitted at once keeps the stamp of
// its start (no second round trip); every admitted call of a session under
// way stamps it, at once or after a wait (Begin does not: a refused call
// must not keep its session under way).
func TestTouchOnAdmission(t *testing.T) {
	store := &touchCounter{LocalSessions: NewLocalSessions()}
	q := New(Options{ReplicaID: "r0", Sessions: store, SessionIdle: 5 * time.Second, Poll: 10 * time.Millisecond})
	req := Request{Scope: "s", Tenant: "a", Weight: 1, MaxWait: time.Second, Session: "a/session/1"}
	ready := func() (bool, time.Duration, Pace) { return true, 0, Pace{} }
	if r := q.Admit(context.Background(), req, ready); !r.Admitted {
		t.Fatalf("%+v", r)
	}
	if n := store.touches.Load(); n != 0 {
		t.Fatalf("%d touches for a new session admitted at once, want 0", n)
	}
	if r := q.Admit(context.Background(), req, ready); !r.Admitted {
		t.Fatalf("%+v", r)
	}
	if n := store.touches.Load(); n != 1 {
		t.Fatalf("%d touches after a call under way admitted at once, want 1", n)
	}
	readyAt := time.Now().Add(100 * time.Millisecond)
	later := func() (bool, time.Duration, Pace) {
		return !time.Now().Before(readyAt), 10 * time.Millisecond, Pace{}
	}
	if r := q.Admit(context.Background(), req, later); !r.Admitted {
		t.Fatalf("%+v", r)
	}
	if n := store.touches.Load(); n != 2 {
		t.Fatalf("%d touches after a call that waited, want 2", n)
	}
}

// failingSessions is a session store whose calls time out.
type failingSessions struct{ calls atomic.Int64 }

func (s *failingSessions) Begin(ctx context.Context, _, _ string, _ int, _ time.Duration) (bool, bool, time.Duration, error) {
	s.calls.Add(1)
	<-ctx.Done()
	return false, false, 0, ctx.Err()
}

func (s *failingSessions) Touch(ctx context.Context, _, _ string, _ time.Duration) error {
	s.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (s *failingSessions) End(ctx context.Context, _, _ string) error { s.calls.Add(1); return nil }

// TestSessionsDownTreatedAsUnderWay: a session store that times out is
// not asked again for orderDownFor; meanwhile calls are treated as under
// way and admitted without waiting out a timeout each.
func TestSessionsDownTreatedAsUnderWay(t *testing.T) {
	store := &failingSessions{}
	q := New(Options{ReplicaID: "r0", Sessions: store, SessionIdle: 5 * time.Second, StepTimeout: 20 * time.Millisecond})
	ready := func() (bool, time.Duration, Pace) { return true, 0, Pace{} }
	for i := range 20 {
		req := Request{Scope: "s", Tenant: "a", Weight: 1, MaxWait: time.Second, Session: fmt.Sprintf("a/session/%d", i)}
		if r := q.Admit(context.Background(), req, ready); !r.Admitted {
			t.Fatalf("call %d: %+v, want admitted", i, r)
		}
	}
	if n := store.calls.Load(); n != 1 {
		t.Fatalf("%d calls reached the failing store, want 1 (then none for %s)", n, orderDownFor)
	}
}

// storeUnderTest is a session store and a look at whether a session is
// under way in it (in the set of every scope).
type storeUnderTest struct {
	st       SessionStore
	underWay func(session string) bool
}

// sessionStores are a local and a Redis store.
func sessionStores(t *testing.T) map[string]storeUnderTest {
	local := NewLocalSessions()
	rdb := redistest.Start(t).Client()
	shared := NewRedisSessions(rdb, "t:")
	return map[string]storeUnderTest{
		"local": {local, func(s string) bool {
			local.mu.Lock()
			defer local.mu.Unlock()
			_, ok := local.last[s]
			return ok
		}},
		"redis": {shared, func(s string) bool {
			return rdb.ZScore(context.Background(), shared.key, s).Err() == nil
		}},
	}
}

// TestSessionBoundPerScope: each scope's bound counts the sessions under
// way on that scope, not every scope's. Counted together, a model paced at
// 2/s (bound 10) refused every new session while a model paced at 200/s
// had 300 under way. A session under way on one scope is under way on
// every other (a task's worker calls go first once its planner call was
// admitted).
func TestSessionBoundPerScope(t *testing.T) {
	const idle = 5 * time.Second
	ctx := context.Background()
	for name, s := range sessionStores(t) {
		t.Run(name, func(t *testing.T) {
			for i := range 5 {
				if _, started, _, err := s.st.Begin(ctx, "fast", fmt.Sprint("f", i), 1000, idle); err != nil || !started {
					t.Fatalf("fast session %d: started %v, %v", i, started, err)
				}
			}
			if _, started, _, err := s.st.Begin(ctx, "slow", "s0", 2, idle); err != nil || !started {
				t.Fatalf("first session of the slow scope: started %v, %v (the fast scope's sessions counted)", started, err)
			}
			if active, _, _, _ := s.st.Begin(ctx, "slow", "f0", 2, idle); !active {
				t.Fatal("a session under way on the fast scope is not under way on the slow one")
			}
			if err := s.st.Touch(ctx, "slow", "f0", idle); err != nil {
				t.Fatal(err)
			}
			// s0 and f0 (admitted there) are under way on the slow scope.
			active, started, retry, err := s.st.Begin(ctx, "slow", "s1", 2, idle)
			if err != nil || active || started || retry <= 0 || retry > idle {
				t.Fatalf("over the slow scope's bound: active %v started %v retry %v %v", active, started, retry, err)
			}
			if _, started, _, _ := s.st.Begin(ctx, "fast", "f5", 6, idle); !started {
				t.Fatal("the fast scope's bound counted the slow scope's session")
			}
		})
	}
	// Both sets of a script in one Cluster slot.
	keys := NewRedisSessions(nil, "sg:").keys("big,ant")
	if keys[0] != "sg:admission:sessions" || redistest.Slot(keys[0]) != redistest.Slot(keys[1]) {
		t.Fatalf("keys %q in slots %d and %d", keys, redistest.Slot(keys[0]), redistest.Slot(keys[1]))
	}
}

// TestQueueSessionBoundPerScope: the same through the queue, bounds from
// each scope's pace.
func TestQueueSessionBoundPerScope(t *testing.T) {
	for name, s := range sessionStores(t) {
		t.Run(name, func(t *testing.T) {
			q := New(Options{ReplicaID: "r0", Sessions: s.st, SessionIdle: 5 * time.Second, SessionSpan: 5 * time.Second})
			paced := func(rate float64) Capacity {
				return func() (bool, time.Duration, Pace) { return true, 0, Pace{Rate: rate} }
			}
			ctx := context.Background()
			for i := range 5 {
				req := Request{Scope: "fast", Tenant: "t", Weight: 1, MaxWait: time.Second, Session: fmt.Sprint("f", i)}
				if r := q.Admit(ctx, req, paced(200)); !r.Admitted {
					t.Fatalf("fast session %d: %+v", i, r)
				}
			}
			// 0.4/s × 5 s: two sessions may be under way on the slow scope.
			for i, want := range []bool{true, true, false} {
				req := Request{Scope: "slow", Tenant: "t", Weight: 1, MaxWait: time.Second, Session: fmt.Sprint("s", i)}
				r := q.Admit(ctx, req, paced(0.4))
				if r.Admitted != want || !want && r.Reason != ReasonSessions {
					t.Fatalf("slow session %d: %+v, admitted want %v", i, r, want)
				}
			}
		})
	}
}

// TestSessionSetOutlivesItsSessions: with the bound full, calls of the
// sessions under way admitted at once and new sessions refused, the shared
// set stays while its sessions do. Before, only a start or a touch after a
// wait renewed the set's expiry: it expired twice the idle time after the
// last start, every session under way with it, and the next new session
// took the place of one under way.
func TestSessionSetOutlivesItsSessions(t *testing.T) {
	const idle = 200 * time.Millisecond
	rdb := redistest.Start(t).Client()
	st := NewRedisSessions(rdb, "t:")
	q := New(Options{ReplicaID: "r0", Sessions: st, SessionIdle: idle, MaxSessions: 1})
	ready := func() (bool, time.Duration, Pace) { return true, 0, Pace{} }
	ctx := context.Background()
	req := func(session string) Request {
		return Request{Scope: "s", Tenant: "t", Weight: 1, MaxWait: 10 * time.Millisecond, Session: session}
	}
	if r := q.Admit(ctx, req("a"), ready); !r.Admitted {
		t.Fatalf("first session: %+v", r)
	}
	for end := time.Now().Add(4 * idle); time.Now().Before(end); time.Sleep(idle / 5) {
		if r := q.Admit(ctx, req("b"), ready); r.Admitted || r.Reason != ReasonSessions {
			t.Fatalf("new session while the bound is full: %+v", r)
		}
		if r := q.Admit(ctx, req("a"), ready); !r.Admitted {
			t.Fatalf("session under way: %+v", r)
		}
	}
	for _, k := range st.keys("s") {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("%s: TTL %v", k, ttl)
		}
	}
}

// TestRefusedCallsDoNotKeepASession: a session whose calls are all refused
// ends after the idle time. Before, Begin renewed a session under way when
// its call arrived, admitted or not: a client retrying refused calls held
// a place of the bound for good.
func TestRefusedCallsDoNotKeepASession(t *testing.T) {
	const idle = 200 * time.Millisecond
	for name, s := range sessionStores(t) {
		t.Run(name, func(t *testing.T) {
			q := New(Options{ReplicaID: "r0", Sessions: s.st, SessionIdle: idle, MaxSessions: 1})
			ctx := context.Background()
			ready := func() (bool, time.Duration, Pace) { return true, 0, Pace{} }
			tooLong := func() (bool, time.Duration, Pace) { return false, time.Hour, Pace{} }
			req := func(session string) Request {
				return Request{Scope: "s", Tenant: "t", Weight: 1, MaxWait: 10 * time.Millisecond, Session: session}
			}
			if r := q.Admit(ctx, req("a"), ready); !r.Admitted {
				t.Fatalf("first call: %+v", r)
			}
			// 1.5 × idle: within the shared set's own expiry (2 × idle).
			for end := time.Now().Add(3 * idle / 2); time.Now().Before(end); time.Sleep(idle / 10) {
				if r := q.Admit(ctx, req("a"), tooLong); r.Admitted || r.Reason != ReasonTooLong {
					t.Fatalf("call beyond its wait: %+v", r)
				}
			}
			if s.underWay("a") {
				t.Fatal("a session without an admitted call for longer than the idle time is still under way")
			}
			if r := q.Admit(ctx, req("b"), ready); !r.Admitted {
				t.Fatalf("new session once the other ended: %+v", r)
			}
		})
	}
}
