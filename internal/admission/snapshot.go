package admission

import (
	"cmp"
	"slices"
	"sync/atomic"
	"time"
)

// Snapshot is what this replica's queue holds now, for the admin status
// page. It is local only: the shared order's depth would cost a Redis call
// per scope, and a status poll must not add load to an order under
// pressure.
type Snapshot struct {
	Waiting  int // requests waiting in this replica, every scope
	MaxQueue int
	Scopes   []ScopeSnapshot // by scope name
	Counters Counters
}

// ScopeSnapshot is one scope's local waiters.
type ScopeSnapshot struct {
	Scope      string
	Depth      int
	Waiters    []Waiters // by tenant, then class
	OldestWait time.Duration
}

// Waiters counts the waiting requests of one tenant in one class.
type Waiters struct {
	Tenant    string
	Class     int
	ClassName string
	Count     int
}

// Counters are how waits ended since the process started, every scope
// together: scopes come and go with their waiters (a reservation window's
// scope lives only while someone waits for it), and counters kept per
// scope would grow with every scope ever seen.
type Counters struct {
	AdmittedAfterWait uint64
	TimedOut          uint64
	Cancelled         uint64
	TooLong           uint64
	Full              uint64
	OrderDown         uint64
}

// counters are Counters as the waiters update them: atomics, so ending a
// wait takes no lock beyond the one dequeue already holds.
type counters struct {
	afterWait, timeout, cancelled, tooLong, full, orderDown atomic.Uint64
}

func (c *counters) refused(why Reason) {
	switch why {
	case ReasonTimeout:
		c.timeout.Add(1)
	case ReasonCancelled:
		c.cancelled.Add(1)
	case ReasonTooLong:
		c.tooLong.Add(1)
	case ReasonFull, ReasonSessions:
		c.full.Add(1)
	case ReasonOrderDown:
		c.orderDown.Add(1)
	}
}

func (c *counters) load() Counters {
	return Counters{AdmittedAfterWait: c.afterWait.Load(), TimedOut: c.timeout.Load(), Cancelled: c.cancelled.Load(),
		TooLong: c.tooLong.Load(), Full: c.full.Load(), OrderDown: c.orderDown.Load()}
}

// Snapshot reports this replica's waiters and counters. It walks the local
// waiters under the queue's mutex and calls no order.
func (q *Queue) Snapshot() Snapshot {
	return q.snapshot(time.Now())
}

func (q *Queue) snapshot(now time.Time) Snapshot {
	q.mu.Lock()
	snap := Snapshot{Waiting: q.waiting, MaxQueue: q.opts.MaxQueue, Scopes: make([]ScopeSnapshot, 0, len(q.scopes))}
	for name, s := range q.scopes {
		type key struct {
			tenant string
			class  int
			name   string
		}
		counts := map[key]int{}
		var oldest time.Time
		for _, w := range slices.Concat(s.shared, s.own) {
			counts[key{w.req.Tenant, w.req.Class, w.req.ClassName}]++
			if oldest.IsZero() || w.since.Before(oldest) {
				oldest = w.since
			}
		}
		ss := ScopeSnapshot{Scope: name, Depth: len(s.shared) + len(s.own), OldestWait: max(now.Sub(oldest), 0),
			Waiters: make([]Waiters, 0, len(counts))}
		for k, n := range counts {
			ss.Waiters = append(ss.Waiters, Waiters{Tenant: k.tenant, Class: k.class, ClassName: k.name, Count: n})
		}
		snap.Scopes = append(snap.Scopes, ss)
	}
	q.mu.Unlock()
	// Sorting needs no lock: the snapshot is ours.
	slices.SortFunc(snap.Scopes, func(a, b ScopeSnapshot) int { return cmp.Compare(a.Scope, b.Scope) })
	for _, s := range snap.Scopes {
		slices.SortFunc(s.Waiters, func(a, b Waiters) int {
			return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Class, b.Class), cmp.Compare(a.ClassName, b.ClassName))
		})
	}
	snap.Counters = q.counts.load()
	return snap
}
