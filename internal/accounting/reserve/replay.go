package reserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Run replays settles that Redis did not take until ctx ends. Call it once,
// in its own goroutine, for the life of the process; Close flushes what is
// left at shutdown.
func (r *Reserver) Run(ctx context.Context) {
	t := time.NewTicker(r.opts.RetryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.replayOnce(ctx)
	}
}

// Pending is how many settles wait for Redis.
func (r *Reserver) Pending() int { return r.pending.len() }

// Close replays what it can within ctx. Settles still pending are dropped
// (counted and logged): their holds expire after accounting.reservation_ttl.
func (r *Reserver) Close(ctx context.Context) error {
	for r.pending.len() > 0 {
		if r.replayOnce(ctx) {
			continue
		}
		select {
		case <-ctx.Done():
			r.replayMu.Lock()
			left := r.pending.pop(r.pending.len())
			r.pending.done(len(left))
			r.replayMu.Unlock()
			r.m.buffered.Set(0)
			r.dropped(left, "shutdown")
			return fmt.Errorf("reserve: %d settles not replayed at shutdown (their holds expire after the reservation TTL): %w", len(left), ctx.Err())
		case <-time.After(r.opts.RetryInterval):
		}
	}
	return nil
}

// replayOnce sends pending settles, oldest first, until the queue is empty
// or Redis fails; it reports whether nothing is left. Settles wait while
// the ledger still replays its own buffer: a money hold must not go before
// the cost that replaces it is recorded, or the hard cap would briefly see
// neither.
func (r *Reserver) replayOnce(ctx context.Context) bool {
	r.replayMu.Lock()
	defer r.replayMu.Unlock()
	if r.pending.len() == 0 {
		if !r.healthy.Load() {
			pctx, cancel := context.WithTimeout(ctx, r.cfg.Load().Redis.ReadTimeout.D())
			err := r.rdb.Ping(pctx).Err()
			cancel()
			if err == nil {
				r.healthy.Store(true)
			}
		}
		return true
	}
	if r.opts.LedgerDrained != nil && !r.opts.LedgerDrained() {
		return false
	}
	replayed, expired := 0, 0
	defer func() {
		if replayed+expired > 0 {
			r.log.Info("reserve: buffered settles replayed", "replayed", replayed, "expired", expired, "pending", r.pending.len())
		}
	}()
	for {
		batch := r.pending.pop(r.opts.ReplayBatch)
		if len(batch) == 0 {
			r.healthy.Store(true)
			return true
		}
		for i, p := range batch {
			now := r.opts.Now()
			if now.After(p.expires) {
				// The holds have freed themselves, but the cost still
				// belongs in the key budgets' counters (the ledger does
				// not keep them): replay that part alone.
				sp, ok := p.spendOnly()
				switch {
				case !ok:
					r.pending.done(1)
					r.m.buffer.WithLabelValues("expired").Inc()
					expired++
					continue
				case !p.markedUntil.IsZero() && !now.Before(p.markedUntil):
					// An earlier attempt may have counted it and its
					// marker may be gone: counting again could count twice.
					r.pending.done(1)
					r.dropped([]pendingSettle{p}, "expired after a lost reply")
					continue
				}
				p, batch[i] = sp, sp
			}
			start := r.opts.Now()
			err := r.runSettle(ctx, p)
			switch {
			case err == nil:
				r.pending.done(1)
				r.m.buffer.WithLabelValues("replayed").Inc()
				replayed++
			case retryable(err):
				batch[i].tried(start, err)
				r.healthy.Store(false)
				dropped, n := r.pending.pushFront(batch[i:])
				r.m.buffered.Set(float64(n))
				r.dropped(dropped, "buffer full")
				r.log.Warn("reserve: settle replay failed; will retry", "pending", n, "err", err)
				return false
			default:
				r.pending.done(1)
				r.log.Error("reserve: buffered settle refused by redis; its hold expires by itself",
					"tenant", p.res.Tenant, "request_id", p.res.RequestID, "err", err)
				r.dropped([]pendingSettle{p}, "refused")
			}
		}
		r.m.buffered.Set(float64(r.pending.len()))
	}
}

// enqueue buffers a settle Redis did not take.
func (r *Reserver) enqueue(p pendingSettle, err error) {
	if r.healthy.Swap(false) {
		r.log.Warn("reserve: redis unavailable; buffering settles until it returns",
			"tenant", p.res.Tenant, "request_id", p.res.RequestID, "err", err)
	}
	dropped, n := r.pending.push(p)
	r.m.buffer.WithLabelValues("buffered").Inc()
	r.m.buffered.Set(float64(n))
	if dropped != nil {
		r.dropped([]pendingSettle{*dropped}, "buffer full")
	}
}

// dropped counts settles given up on; one error line per second at most
// (a full buffer under load would flood the log; the metric is exact).
func (r *Reserver) dropped(ps []pendingSettle, why string) {
	if len(ps) == 0 {
		return
	}
	r.m.buffer.WithLabelValues("dropped").Add(float64(len(ps)))
	now := time.Now().UnixNano()
	if last := r.lastDrop.Load(); now-last > int64(time.Second) && r.lastDrop.CompareAndSwap(last, now) {
		r.log.Error("reserve: settles dropped; their holds count until the reservation TTL", "count", len(ps),
			"why", why, "tenant", ps[0].res.Tenant, "request_id", ps[0].res.RequestID)
	}
}

// mayHaveRun reports whether a failed call may still have run in Redis
// (its reply lost): not when Redis answered with an error, nor when the
// client never got a connection to send it on.
func mayHaveRun(err error) bool {
	var re redis.Error
	var oe *net.OpError
	switch {
	case errors.As(err, &re), errors.As(err, &oe) && oe.Op == "dial",
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed):
		return false
	}
	return true
}

// retryable tells an unreachable or recovering Redis (worth buffering and
// retrying) from one that refuses this script (retrying cannot help).
func retryable(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return true // network, timeout, pool exhausted, closed connection
	}
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "NOREPLICAS", "MOVED", "ASK"} {
		if strings.HasPrefix(re.Error(), p) {
			return true
		}
	}
	return false
}
