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
	// TTL, an upper bound of admission + TTL): replaying later is pointless.
	expires time.Time
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
