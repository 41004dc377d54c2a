package admission

import (
	"context"
	"sync"
	"time"
)

// leaveGrace is how long past its deadline a ticket whose leave keeps
// failing is still retried: by then every step in its scope has dropped it
// as expired.
const leaveGrace = 10 * time.Second

// maxLeaveBatch bounds one retry round trip.
const maxLeaveBatch = 512

// BatchLeaver is an Order that takes many tickets out in one round trip.
type BatchLeaver interface {
	LeaveAll(ctx context.Context, ts []Ticket) error
}

// leaves holds the tickets whose leave failed, for one goroutine to
// retry in batches. A mass cancel on a busy replica sends hundreds of
// leaves at once, each bounded by StepTimeout; the ones that ran out kept
// their tickets in the shared order, ahead of every replica's waiters,
// until their deadline (300 cancelled streams on a loaded 2-core box: one
// run in five still had tickets 5 s later).
type leaves struct {
	mu      sync.Mutex
	pending []pendingLeave
	running bool
	warn    warnEvery
}

type pendingLeave struct {
	order Order
	t     Ticket
}

// leave removes a ticket that stops waiting: at once, even when the
// request's context is gone, bounded by StepTimeout; a leave that fails is
// retried in the background.
func (q *Queue) leave(order Order, t *Ticket) {
	ctx, cancel := context.WithTimeout(context.Background(), q.opts.StepTimeout)
	defer cancel()
	if err := order.Leave(ctx, t); err != nil {
		q.opts.Logger.Debug("admission leave failed, retrying", "err", err)
		q.retryLeave(order, t)
	}
}

// leaveShared removes t from an order that just failed a step, given
// longer than a step to answer (it failed for being slow), and retried
// like any failed leave.
func (q *Queue) leaveShared(order Order, t *Ticket) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := order.Leave(ctx, t); err != nil {
		q.opts.Logger.Debug("admission leave after a failed step, retrying", "err", err)
		q.retryLeave(order, t)
	}
}

// retryLeave queues t for the retrying goroutine, starting it if idle.
func (q *Queue) retryLeave(order Order, t *Ticket) {
	l := &q.leaves
	l.mu.Lock()
	if len(l.pending) >= 4*q.opts.MaxQueue {
		// Redis down for long: the oldest are nearest their deadline.
		l.pending = l.pending[1:]
	}
	l.pending = append(l.pending, pendingLeave{order: order, t: *t})
	idle := !l.running
	l.running = true
	l.mu.Unlock()
	q.opts.Metrics.leaveRetried()
	if idle {
		go q.retryLeaves()
	}
}

// retryLeaves retries the pending leaves, backing off while they fail,
// until none is left or every one left is past its grace.
func (q *Queue) retryLeaves() {
	l := &q.leaves
	backoff := q.opts.Poll
	for {
		l.mu.Lock()
		batch := l.pending
		l.pending = nil
		if len(batch) == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		failed := q.leaveAll(batch)
		if len(failed) == 0 {
			backoff = q.opts.Poll
			continue
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
		l.mu.Lock()
		l.pending = append(failed, l.pending...)
		l.mu.Unlock()
	}
}

// leaveAll takes batch out of its orders and returns the tickets still
// to retry.
func (q *Queue) leaveAll(batch []pendingLeave) (failed []pendingLeave) {
	now := time.Now()
	for len(batch) > 0 {
		// One order at a time: in practice the shared one.
		order, same, rest := batch[0].order, batch[:0:0], batch[:0:0]
		for _, p := range batch {
			if p.order == order && len(same) < maxLeaveBatch {
				same = append(same, p)
			} else {
				rest = append(rest, p)
			}
		}
		batch = rest
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := leaveTickets(ctx, order, same)
		cancel()
		if err == nil {
			continue
		}
		l := &q.leaves
		l.warn.warn(q.opts.Logger, "admission leave failed", err, "tickets", len(same))
		for _, p := range same {
			if now.Before(p.t.Deadline.Add(leaveGrace)) {
				failed = append(failed, p)
			}
		}
	}
	return failed
}

func leaveTickets(ctx context.Context, order Order, ps []pendingLeave) error {
	if b, ok := order.(BatchLeaver); ok {
		ts := make([]Ticket, len(ps))
		for i, p := range ps {
			ts[i] = p.t
		}
		return b.LeaveAll(ctx, ts)
	}
	for _, p := range ps {
		if err := order.Leave(ctx, &p.t); err != nil {
			return err
		}
	}
	return nil
}
