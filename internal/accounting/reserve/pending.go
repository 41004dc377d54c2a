package reserve

import (
	"sync"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
)

// pendingSettle is a settle (or release) Redis did not take. It keeps the
// script's keys and arguments as computed when it failed, so a replay
// touches exactly the scopes the reservation was made in whatever the
// config says by then. Replaying it is safe any number of times: the
// script's settled marker makes the second run a no-op.
type pendingSettle struct {
	res    Reservation
	tokens int64
	cost   pricing.Money
	keys   []string
	args   []any
	// expires is when the hold frees itself anyway (queued + reservation
	// TTL, an upper bound of admission + TTL): a later replay only counts
	// the key budgets' spend (spendOnly).
	expires time.Time
	// ttl is the reservation TTL the settle was made with; the settled
	// marker lives ttl + window from when the script ran.
	ttl time.Duration
	// markedUntil is set when an attempt may have run in Redis though it
	// failed (its reply lost): until then the settled marker of the first
	// such attempt surely still stops a second count (a window's margin
	// short of its expiry). Zero: no attempt may have run, so a replay is
	// the first to count.
	markedUntil time.Time
}

// tried notes an attempt that started at start and failed with err. The
// first that may have run counts: a later one found its marker.
func (p *pendingSettle) tried(start time.Time, err error) {
	if p.markedUntil.IsZero() && mayHaveRun(err) {
		p.markedUntil = start.Add(p.ttl)
	}
}

// spendOnly is p without its holds, for a replay after they freed
// themselves: only the key budgets' spend counters, which nothing else
// keeps, as 'c' scopes (counted, no hold touched). ok is false when p
// counts no spend (a release, no key budget).
func (p pendingSettle) spendOnly() (q pendingSettle, ok bool) {
	if p.cost <= 0 {
		return p, false
	}
	q = p
	q.keys = []string{p.keys[0]}
	q.args = append([]any(nil), p.args[:4]...)
	q.res.Scopes = nil
	for i, name := range p.res.Scopes {
		if name != ScopeKeyBudget {
			continue
		}
		q.keys = append(q.keys, p.keys[1+3*i:4+3*i]...)
		q.args = append(q.args, "c", p.args[5+3*i], p.args[6+3*i])
		q.res.Scopes = append(q.res.Scopes, name)
	}
	q.args[3] = len(q.res.Scopes)
	return q, len(q.res.Scopes) > 0
}

// pendingSettles holds settles waiting for Redis, oldest first, bounded by
// capacity: when full the oldest is dropped and its hold expires by its
// TTL, as every hold did before settles were buffered.
type pendingSettles struct {
	mu    sync.Mutex
	items []pendingSettle
	cap   int
	// inflight counts settles popped for a replay that has not finished
	// with them: they are still pending for Pending and the gauge.
	inflight int
}

// push appends p and returns the one dropped to make room, if any.
func (q *pendingSettles) push(p pendingSettle) (dropped *pendingSettle, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cap <= 0 {
		return &p, len(q.items) + q.inflight
	}
	if len(q.items) >= q.cap {
		d := q.items[0]
		dropped = &d
		q.items[0] = pendingSettle{}
		q.items = q.items[1:]
	}
	q.items = append(q.items, p)
	return dropped, len(q.items) + q.inflight
}

// pop removes up to n of the oldest settles for a replay, which hands each
// back with done or pushFront.
func (q *pendingSettles) pop(n int) []pendingSettle {
	q.mu.Lock()
	defer q.mu.Unlock()
	n = min(n, len(q.items))
	q.inflight += n
	out := make([]pendingSettle, n)
	copy(out, q.items)
	clear(q.items[:n])
	q.items = q.items[n:]
	if len(q.items) == 0 {
		q.items = nil // let the backing array go
	}
	return out
}

// done marks n popped settles finished (sent, expired or given up).
func (q *pendingSettles) done(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.inflight = max(q.inflight-n, 0)
}

// pushFront puts popped settles a replay could not send back in front
// (they are older than anything queued meanwhile); what no longer fits is
// returned, oldest first.
func (q *pendingSettles) pushFront(batch []pendingSettle) (dropped []pendingSettle, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.inflight = max(q.inflight-len(batch), 0)
	items := make([]pendingSettle, 0, len(batch)+len(q.items))
	items = append(append(items, batch...), q.items...)
	if over := len(items) - q.cap; over > 0 {
		dropped = items[:over:over]
		items = items[over:]
	}
	q.items = items
	return dropped, len(q.items) + q.inflight
}

// len counts queued and in-flight settles.
func (q *pendingSettles) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) + q.inflight
}
