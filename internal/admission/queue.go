package admission

import (
	"container/heap"
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Request is one request asking to be admitted.
type Request struct {
	Scope     string // the order's scope: the request's target backends
	Tenant    string
	Weight    float64 // tenant weight, > 0
	Class     int     // priority, 0 first
	ClassName string
	MaxWait   time.Duration
	Tokens    int // estimated tokens, for a pace in tokens
	// Session is the agent's chain of calls the request belongs to
	// (sessions.go); empty: not tracked.
	Session string
	// OnWait, when set, is called once before the request starts waiting
	// (never when it is admitted at once).
	OnWait func()
	// underWay: a call of a session under way; newSession: the first call
	// of a session that started with it (set by beginSession).
	underWay, newSession bool
}

// Capacity reports whether the keys could serve a request now, when they
// will if not, and the scope's pace.
type Capacity func() (ready bool, retryAfter time.Duration, pace Pace)

// Reason says why a request was not admitted.
type Reason string

const (
	ReasonTimeout   Reason = "timeout"    // waited its maximum
	ReasonTooLong   Reason = "too_long"   // capacity returns after its maximum wait
	ReasonFull      Reason = "queue_full" // max_queue requests already wait here
	ReasonCancelled Reason = "cancelled"  // the client went away
	ReasonOrderDown Reason = "order_down" // Redis unreachable, fail-closed
)

// Result is the queue's answer.
type Result struct {
	Admitted bool
	Reason   Reason
	Waited   time.Duration
	// Paced: the pace, not missing keys, held it back at some point.
	Paced bool
	// RetryAfter estimates when capacity returns (refusals).
	RetryAfter time.Duration
}

// Options configure a Queue.
type Options struct {
	Order    Order // shared order; nil: a LocalOrder
	MaxQueue int   // per replica; 0: 4096
	// Poll is how often the first local waiter of a scope asks the order
	// again while capacity is missing or others are ahead (default 20ms).
	Poll time.Duration
	// StepTimeout bounds each Order call (default 50ms).
	StepTimeout time.Duration
	// FailOpen: when the shared order fails, keep going in this replica's
	// own order; otherwise refuse (429).
	FailOpen bool
	// Lead is how many places behind the first of the shared order this
	// replica's first waiter of a scope may still be admitted from
	// (Ticket.Lead); 0: the default 3; negative: only the global first,
	// which with several replicas costs up to a poll per admission.
	Lead int
	// Burst is the fewest requests a paced scope admits back to back
	// (Pace.Burst, when lower); default Lead+1. A step that comes late
	// (its replica busy, Redis a little slow) would otherwise lose the
	// slot it missed for good: measured with three replicas and 300
	// waiters against a 200/s pace on the loaded 2-core box, burst 1
	// admitted 137/s, burst 2 183/s. Providers do not see the burst:
	// each key's own pace spaces the picks (keypool/keypace.go).
	Burst int
	// Sessions, when set, puts the calls of sessions under way first and
	// bounds how many are under way on each scope (sessions.go).
	// SessionIdle ends a session without an admitted call (default 5s);
	// MaxSessions bounds them (0: the scope's pace × SessionSpan;
	// SessionSpan 0: unbounded).
	Sessions    SessionStore
	SessionIdle time.Duration
	SessionSpan time.Duration
	MaxSessions int
	ReplicaID   string
	Logger      *slog.Logger
	Metrics     *Metrics // nil: not recorded
}

// Queue holds this replica's waiting requests. Only the first local waiter
// of each scope talks to the order; the others wait for their turn
// locally, so a replica costs the order one call per Poll per scope
// however many requests wait in it.
type Queue struct {
	opts     Options
	fallback *LocalOrder
	seq      atomic.Uint64
	mu       sync.Mutex
	waiting  int
	scopes   map[string]*scopeWait
	counts   counters // for Snapshot
	// sessionsWarn throttles the warning for an unavailable session store
	// (one per request would flood the log while Redis is slow or down).
	sessionsWarn warnEvery
	orderWarn    warnEvery
	// orderDownUntil (unix ns): until then, failing open, steps go to the
	// local order without trying the shared one.
	orderDownUntil atomic.Int64
	// sessionsDownUntil (unix ns): until then the session store is not
	// asked (sessions.go).
	sessionsDownUntil atomic.Int64
	leaves            leaves // failed leaves, retried (leave.go)
}

// New returns a Queue.
func New(opts Options) *Queue {
	if opts.MaxQueue <= 0 {
		opts.MaxQueue = 4096
	}
	if opts.Poll <= 0 {
		opts.Poll = 20 * time.Millisecond
	}
	if opts.StepTimeout <= 0 {
		opts.StepTimeout = 50 * time.Millisecond
	}
	if opts.Lead == 0 {
		opts.Lead = defaultLead
	}
	if opts.Burst <= 0 {
		opts.Burst = max(opts.Lead, 0) + 1
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.SessionIdle <= 0 {
		opts.SessionIdle = 5 * time.Second
	}
	q := &Queue{opts: opts, fallback: NewLocalOrder(), scopes: map[string]*scopeWait{}}
	if q.opts.Order == nil {
		q.opts.Order = q.fallback
	}
	return q
}

// waiter is one local waiting request. turn is closed when it becomes the
// first local waiter of its scope.
type waiter struct {
	t     Ticket
	req   Request
	tag   float64
	seq   uint64
	index int
	turn  chan struct{}
	since time.Time // when it asked to be admitted
	// granted is closed when the first waiter's step admitted it too
	// (Order.Step's next).
	granted chan struct{}
	// own: its ticket is in this replica's own order (failing open), not
	// the shared one.
	own bool
	// Guarded by Queue.mu: signalled: turn is closed; claimed: its ticket
	// is in a step of the first waiter's, so it does not step itself;
	// removed: out of the scope's heap (granted, or dequeued).
	signalled, claimed, removed bool
}

// scopeWait holds a scope's waiters, one heap per order: tags from the
// shared order and from this replica's own (failing open) come from
// different clocks and cannot be ranked together. Mixed in one heap, a
// first waiter the shared order could not admit yet held back the
// replica's own waiters behind it until the backstop (2,000 queued
// streams on one key: one loaded run in four timed out).
type scopeWait struct {
	shared, own waitHeap
}

// heap is the heap w waits in.
func (s *scopeWait) heap(w *waiter) *waitHeap {
	if w.own {
		return &s.own
	}
	return &s.shared
}

func (s *scopeWait) empty() bool { return len(s.shared) == 0 && len(s.own) == 0 }

// Admit decides for one request: at once when it can, else after waiting
// its turn (at most req.MaxWait, less when ctx ends first).
func (q *Queue) Admit(ctx context.Context, req Request, capacity Capacity) Result {
	if q.opts.Sessions == nil || req.Session == "" {
		return q.admit(ctx, req, capacity)
	}
	start := time.Now()
	if res, ok := q.beginSession(ctx, &req, capacity, start); !ok {
		return res
	}
	if req.newSession {
		capacity = q.gated(capacity)
	}
	res := q.admit(ctx, req, capacity)
	if !res.Admitted && req.newSession {
		q.endSession(req)
	}
	if res.Admitted && (req.underWay || time.Since(start) > q.opts.Poll) && !q.sessionsDown() {
		// Only an admitted call keeps a session under way: Begin does not
		// renew one (a client retrying refused calls held its place for
		// good). A session started by this call and admitted at once
		// keeps the stamp of its start.
		sctx, cancel := context.WithTimeout(ctx, q.opts.StepTimeout)
		if err := q.opts.Sessions.Touch(sctx, req.Scope, req.Session, q.opts.SessionIdle); err != nil && ctx.Err() == nil {
			q.sessionsFailed(err)
		}
		cancel()
	}
	if res.Waited > 0 || res.Admitted && time.Since(start) > q.opts.Poll {
		res.Waited = time.Since(start)
	}
	return res
}

// admit is Admit without sessions: one order step at once, and when that
// does not admit the request, a place in the local queue to wait from.
func (q *Queue) admit(ctx context.Context, req Request, capacity Capacity) Result {
	start := time.Now()
	ready, ra, pace := q.capacity(capacity)
	if !ready && ra > req.MaxWait {
		q.refused(req, ReasonTooLong)
		return Result{Reason: ReasonTooLong, RetryAfter: ra}
	}
	w := &waiter{req: req, seq: q.seq.Add(1), since: start}
	w.t = Ticket{ID: q.opts.ReplicaID + "-" + strconv.FormatUint(w.seq, 36), Scope: req.Scope, Tenant: req.Tenant,
		Weight: req.Weight, Class: req.Class, Tokens: req.Tokens, Deadline: start.Add(req.MaxWait)}
	order := q.opts.Order
	d, err := q.step(ctx, &order, &w.t, nil, pace, ready)
	if err != nil {
		if ctx.Err() != nil {
			// The client left during the step (waiting for a pooled
			// connection, in a burst): not the order failing.
			q.leave(order, &w.t)
			return q.cancelled(req, start)
		}
		// Failing closed: a step that timed out may still run in Redis and
		// join the ticket, which would then hold a place ahead of every
		// replica's waiters until its deadline (admission only within the
		// lead of the front). (Failing open, step took it out and went on
		// in the local order.)
		t := w.t
		go q.leaveShared(order, &t)
		return q.refuse(req, ReasonOrderDown, ra, start)
	}
	if d.Admitted {
		return Result{Admitted: true}
	}
	if wait := (&stepState{d: d, ready: ready, ra: ra, pace: pace}).timeoutRetry(); req.newSession && pace.Rate > 0 && wait > req.MaxWait {
		// A new session whose place in the paced order comes after its
		// wait: refused now, with when its place would come.
		q.leave(order, &w.t)
		return q.refuse(req, ReasonSessions, wait, start)
	}
	w.tag, w.own = d.Tag, order == q.fallback
	// Its channels only now: most requests are admitted at once.
	w.turn, w.granted = make(chan struct{}), make(chan struct{})
	head, ok := q.enqueue(w)
	if !ok {
		q.leave(order, &w.t)
		return q.refuse(req, ReasonFull, max(ra, d.Wait), start)
	}
	defer q.dequeue(w)
	if req.OnWait != nil {
		req.OnWait()
	}
	q.opts.Metrics.waiting(req, 1)
	defer q.opts.Metrics.waiting(req, -1)
	return q.wait(ctx, w, order, capacity, stepState{d: d, ready: ready, ra: ra, pace: pace, at: time.Now()}, head)
}

// stepState is the last order step of a waiting request and the capacity
// it was taken with.
type stepState struct {
	d     Decision
	ready bool
	ra    time.Duration
	pace  Pace
	// at is when the step was taken (zero: now).
	at time.Time
}

// wait holds enqueued waiter w until the order admits it, its maximum
// wait ends, ctx ends or the order fails. last is the step that enqueued
// it; head: it is the first local waiter of its scope. The caller
// dequeues w.
func (q *Queue) wait(ctx context.Context, w *waiter, order Order, capacity Capacity, last stepState, head bool) Result {
	req, start := w.req, w.since
	paced := last.d.Wait > 0
	turn := w.turn
	deadline := time.NewTimer(req.MaxWait - time.Since(start))
	defer deadline.Stop()
	var poll *time.Timer
	for {
		next := q.pollInterval(head, &last)
		if poll == nil {
			poll = time.NewTimer(next)
			defer poll.Stop()
		} else {
			poll.Reset(next)
		}
		select {
		case <-ctx.Done():
			if q.stopWaiting(w) {
				return q.admitted(w, paced)
			}
			q.leave(order, &w.t)
			return q.cancelled(req, start)
		case <-deadline.C:
			if q.stopWaiting(w) {
				return q.admitted(w, paced)
			}
			q.leave(order, &w.t)
			return q.refuse(req, ReasonTimeout, q.timedOut(capacity, &last), start)
		case <-w.granted:
			return q.admitted(w, paced)
		case <-turn:
			// First here now: ask the order at once (the waiter before it
			// was just admitted or left).
			head, turn = true, nil // closed: do not select it again
		case <-poll.C:
		}
		if head {
			w.t.Lead = max(q.opts.Lead, 0)
		}
		batch, ok := q.beginStep(w, head)
		if !ok {
			continue // in another waiter's step now
		}
		var err error
		shared := order
		last.ready, last.ra, last.pace = q.capacity(capacity)
		last.d, err = q.step(ctx, &order, &w.t, tickets(batch), last.pace, last.ready)
		last.at = time.Now()
		q.endStep(w, batch, last.d)
		if err != nil {
			q.leave(order, &w.t)
			if ctx.Err() != nil {
				return q.cancelled(req, start)
			}
			return q.refuse(req, ReasonOrderDown, last.ra, start)
		}
		paced = paced || last.d.Wait > 0
		if order != shared {
			// The shared order failed: this request goes on in the
			// replica's own. Its shared ticket would hold its place
			// there until its deadline, ahead of every replica's
			// waiters (with the lead, nobody behind a few such tickets
			// is admitted: 2,000 queued requests on one key, 880 timed
			// out), so it leaves.
			t := w.t
			go q.leaveShared(shared, &t)
		}
		if last.d.Admitted {
			return q.admitted(w, paced)
		}
		if order != shared {
			if head, turn = q.moveOwn(w, last.d.Tag); head {
				turn = nil
			}
		}
	}
}

// moveOwn moves waiter w, whose ticket now waits in this replica's own
// order with tag, to the scope's heap of that order. head reports that it
// is first there; otherwise turn is closed when it becomes so. The shared
// heap's next waiter gets its turn.
func (q *Queue) moveOwn(w *waiter, tag float64) (head bool, turn chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.removed || w.own {
		return w.signalled, w.turn
	}
	s := q.scopes[w.req.Scope]
	heap.Remove(&s.shared, w.index)
	q.signalFirst(&s.shared)
	w.own, w.tag, w.signalled = true, tag, false
	w.turn = make(chan struct{})
	heap.Push(&s.own, w)
	if s.own[0] == w {
		w.signalled = true
		return true, w.turn
	}
	return false, w.turn
}

// signalFirst gives the turn to the first waiter of h, once.
func (q *Queue) signalFirst(h *waitHeap) {
	if len(*h) == 0 {
		return
	}
	if first := (*h)[0]; !first.signalled {
		first.signalled = true
		close(first.turn)
	}
}

// admitted records and answers the admission of waiter w.
func (q *Queue) admitted(w *waiter, paced bool) Result {
	waited := time.Since(w.since)
	q.opts.Metrics.admitted(w.req, waited, paced)
	q.counts.afterWait.Add(1)
	return Result{Admitted: true, Waited: waited, Paced: paced}
}

// pollInterval is how long a waiter sleeps before it asks the order
// again. The first local waiter asks every Poll (sooner when the pace or
// the keys say so); the others get their turn when the one before them
// leaves, and ask only as a backstop should the local order ever differ
// from the shared one. The backstop is rare: with 500 waiters a 200 ms
// backstop is 2,500 Lua steps a second; with it, on the loaded box, 485
// steps ran over admission.redis_timeout and fell back to per-replica
// order in the 200-agent fairness run (gold's share 0.61 for 0.75).
func (q *Queue) pollInterval(head bool, last *stepState) time.Duration {
	if !head {
		return max(50*q.opts.Poll, backstopPoll)
	}
	switch {
	case last.d.Wait > 0:
		return min(last.d.Wait, q.opts.Poll)
	case !last.ready && last.ra > 0:
		return min(last.ra, q.opts.Poll)
	}
	return q.opts.Poll
}

// timeoutRetry is the Retry-After of a request that waited its maximum:
// when the keys return, or when the pace reaches its place in the order,
// whichever is later, as of now (the step was taken at s.at).
func (s *stepState) timeoutRetry() time.Duration {
	retry := s.ra
	if s.pace.Rate > 0 {
		retry = max(retry, time.Duration(float64(s.d.Ahead+1)/s.pace.Rate*float64(time.Second)))
	}
	retry = max(retry, s.d.Wait)
	if !s.at.IsZero() {
		retry = max(retry-time.Since(s.at), 0)
	}
	return retry
}

// timedOut is the Retry-After of a waiter whose maximum wait ended after
// last: its place in the order as of now, and the keys as they are now. A
// waiter behind the first steps only when its wait begins (and at the
// backstop), so its last step can be as old as the wait; extproc/admit
// takes the later of this and the keys' reopening, so a stale figure
// would stand.
func (q *Queue) timedOut(capacity Capacity, last *stepState) time.Duration {
	s := *last
	s.ra = 0 // the keys are asked again
	retry := s.timeoutRetry()
	if ready, ra, _ := q.capacity(capacity); !ready {
		retry = max(retry, ra)
	}
	return retry
}

// capacity asks the keys, applying Options.Burst to the scope's pace.
func (q *Queue) capacity(c Capacity) (bool, time.Duration, Pace) {
	ready, ra, p := c()
	if p.Rate > 0 {
		p.Burst = max(p.Burst, q.opts.Burst)
	}
	return ready, ra, p
}

// step runs one order decision, bounded; on failure it falls back to the
// local order when failing open (and stays there for this request).
func (q *Queue) step(ctx context.Context, order *Order, t *Ticket, next []*Ticket, p Pace, ready bool) (Decision, error) {
	if q.opts.FailOpen && *order != q.fallback && time.Now().UnixNano() < q.orderDownUntil.Load() {
		// The shared order failed a step within the last orderDownFor:
		// keep this replica's own order meanwhile rather than have each
		// request wait out a step timeout of its own first (under load,
		// a backlog drained one timed-out step at a time).
		*order = q.fallback
		next = nil // they joined the shared order, not this one
	}
	sctx, cancel := context.WithTimeout(ctx, q.opts.StepTimeout)
	d, err := (*order).Step(sctx, t, next, p, ready)
	cancel()
	if err == nil || ctx.Err() != nil {
		return d, err
	}
	q.opts.Metrics.orderError()
	q.orderWarn.warn(q.opts.Logger, "admission order unreachable", err, "fail_open", q.opts.FailOpen)
	if !q.opts.FailOpen || *order == q.fallback {
		return d, err
	}
	q.orderDownUntil.Store(time.Now().Add(orderDownFor).UnixNano())
	// The failed step may have put the ticket in the shared order (a
	// timeout after Redis ran it): take it out, or the other replicas'
	// requests wait behind it until its deadline.
	shared, left := *order, *t
	go q.leaveShared(shared, &left)
	*order = q.fallback
	// Those in next joined the shared order, not this one: each steps
	// on its own when its turn comes.
	return q.fallback.Step(ctx, t, nil, p, ready)
}

func (q *Queue) refuse(req Request, why Reason, retry time.Duration, start time.Time) Result {
	q.refused(req, why)
	return Result{Reason: why, RetryAfter: max(retry, time.Second), Waited: time.Since(start)}
}

// cancelled answers a request whose client went away while it waited.
func (q *Queue) cancelled(req Request, start time.Time) Result {
	q.refused(req, ReasonCancelled)
	return Result{Reason: ReasonCancelled, Waited: time.Since(start)}
}

// refused counts a refusal in the metrics and for Snapshot.
func (q *Queue) refused(req Request, why Reason) {
	q.opts.Metrics.refused(req, why)
	q.counts.refused(why)
}

// enqueue adds w to its scope; head reports that it is first there (an
// earlier first that it overtook keeps polling too: harmless, one more
// caller of the order until it is admitted).
func (q *Queue) enqueue(w *waiter) (head, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting >= q.opts.MaxQueue {
		return false, false
	}
	q.waiting++
	s := q.scopes[w.req.Scope]
	if s == nil {
		s = &scopeWait{}
		q.scopes[w.req.Scope] = s
	}
	h := s.heap(w)
	heap.Push(h, w)
	if (*h)[0] == w {
		w.signalled = true
		return true, true
	}
	return false, true
}

func (q *Queue) dequeue(w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.removeLocked(w)
}

// removeLocked takes w out of its scope's heap (once) and gives the turn to
// the new first waiter.
func (q *Queue) removeLocked(w *waiter) {
	if w.removed {
		return
	}
	w.removed = true
	q.waiting--
	s := q.scopes[w.req.Scope]
	h := s.heap(w)
	heap.Remove(h, w.index)
	if s.empty() {
		delete(q.scopes, w.req.Scope)
		return
	}
	q.signalFirst(h)
}

// maxNext bounds how many waiters one step admits after the first: a
// burst of thousands queued on one replica drains in steps of this many
// (one Redis round trip each) instead of one step per request. The pace
// still spaces them (at most its burst back to back), and each must be
// first in the shared order: a batch only drains what this replica holds
// at the front (within the lead, batches let admissions overtake more
// than the lead's places across replicas).
const maxNext = 31

// beginStep marks w as in a step of its own, so no other waiter's step
// carries its ticket at the same time (a ticket admitted by one step would
// join again by the other); ok is false when one already does. The first
// waiter of a scope also claims up to maxNext waiters after it, in order
// (not the first calls of sessions), for the step to admit after it.
func (q *Queue) beginStep(w *waiter, head bool) (batch []*waiter, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.claimed || w.removed {
		return nil, false
	}
	w.claimed = true
	s := q.scopes[w.req.Scope]
	if !head || s == nil {
		return nil, true
	}
	h := *s.heap(w)
	if len(h) < 2 {
		return nil, true
	}
	// Best-first walk of the heap from its root: yields waiters in order
	// and touches about twice as many nodes as it returns.
	frontier := []int{0}
	for len(frontier) > 0 && len(batch) < maxNext {
		b := 0
		for i := range frontier {
			if h.Less(frontier[i], frontier[b]) {
				b = i
			}
		}
		i := frontier[b]
		frontier[b] = frontier[len(frontier)-1]
		frontier = frontier[:len(frontier)-1]
		// A session's first call waits for its own step: the session
		// bound gates it (sessions.go), not the first waiter's.
		if c := h[i]; !c.claimed && !c.req.newSession && h.less(w, c) {
			c.claimed = true
			batch = append(batch, c)
		}
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(h) {
				frontier = append(frontier, c)
			}
		}
	}
	return batch, true
}

// endStep settles w's step: the first d.Next waiters of batch were
// admitted with it (they leave the heap now and are told), the others may
// step again.
func (q *Queue) endStep(w *waiter, batch []*waiter, d Decision) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w.claimed = false
	for i, c := range batch {
		c.claimed = false
		if !d.Admitted || i >= d.Next || c.removed {
			// (removed: it stopped waiting during the step; when the
			// step admitted it anyway, its slot is spent.)
			continue
		}
		q.removeLocked(c)
		close(c.granted)
	}
}

// stopWaiting is for a waiter whose wait ended (deadline or client gone):
// it reports whether a step admitted it meanwhile, and otherwise takes it
// out of the heap so no later step grants it.
func (q *Queue) stopWaiting(w *waiter) (granted bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-w.granted:
		return true
	default:
	}
	q.removeLocked(w)
	return false
}

// tickets are the waiters' tickets, for Order.Step.
func tickets(ws []*waiter) []*Ticket {
	if len(ws) == 0 {
		return nil
	}
	ts := make([]*Ticket, len(ws))
	for i, w := range ws {
		ts[i] = &w.t
	}
	return ts
}

// orderDownFor is how long a replica keeps its own order after a step of
// the shared one failed (failing open), before it asks the shared one again.
const orderDownFor = time.Second

// backstopPoll is the least interval at which a waiter that is not first
// on its replica asks the shared order.
const backstopPoll = time.Second

// defaultLead: a replica's first waiter may be admitted from the first
// four places of the shared order. With three replicas whose first
// waiters each ask when the pace allows, the first to ask takes the slot;
// the order between replicas is kept within those places (measured in
// TestSwarmFairnessAcrossReplicas), each replica's own exactly.
const defaultLead = 3

// Waiting is the number of requests waiting in this replica.
func (q *Queue) Waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting
}

// waitHeap orders local waiters by their tag in the shared order.
type waitHeap []*waiter

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return h.less(h[i], h[j]) }

func (waitHeap) less(a, b *waiter) bool {
	if a.tag != b.tag {
		return a.tag < b.tag
	}
	// Ties as Redis orders a sorted set's equal scores: by member.
	return a.t.ID < b.t.ID
}
func (h waitHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *waitHeap) Push(x any)   { w := x.(*waiter); w.index = len(*h); *h = append(*h, w) }
func (h *waitHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}
