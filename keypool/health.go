package keypool

import (
	"context"
	"sync"
	"time"
)

// signal wakes the Changes consumer without blocking; signals coalesce.
func (p *Pools) signal() {
	select {
	case p.changes <- struct{}{}:
	default:
	}
}

// wake makes Run recompute when the next open period ends.
func (p *Pools) wake() {
	select {
	case p.rearm <- struct{}{}:
	default:
	}
}

// Changes fires (coalesced, never blocking the sender) when BackendHealth
// may have changed. It has one consumer: the control plane.
func (p *Pools) Changes() <-chan struct{} { return p.changes }

// BackendHealth reports, per backend, whether some key is not open. A
// backend whose keys are all open is unhealthy until the soonest open
// period ends: then its keys are half-open and it is reported healthy again
// so EDS sends the traffic a probe needs.
func (p *Pools) BackendHealth() map[string]bool {
	now := p.clock.Now()
	pools := *p.pools.Load()
	out := make(map[string]bool, len(pools))
	for name, kp := range pools {
		kp.mu.Lock()
		out[name] = kp.healthyLocked(now)
		kp.mu.Unlock()
	}
	return out
}

// refresh recomputes health and gauges after time passed (open periods
// ending) and signals Changes when some backend flipped. It returns the
// soonest end of an open period (zero if none).
func (p *Pools) refresh() time.Time {
	now := p.clock.Now()
	var soonest time.Time
	flipped := false
	for name, kp := range *p.pools.Load() {
		kp.mu.Lock()
		flipped = kp.refreshLocked(now) || flipped
		healthy := kp.healthy
		if t := kp.soonestLocked(now); !t.IsZero() && (soonest.IsZero() || t.Before(soonest)) {
			soonest = t
		}
		kp.mu.Unlock()
		v := 0.0
		if healthy {
			v = 1
		}
		p.metrics.healthy.WithLabelValues(name).Set(v)
	}
	if flipped {
		p.signal()
	}
	return soonest
}

// Available reports whether a new request for a pool served by backends
// could get a key now (attempt 1, breakers, quotas, in-flight caps and local
// windows; not the shared limiter). When not, retryAfter is the soonest a
// key reopens: the router-level filter answers 429/503 with it. Unknown
// backends are ignored; with none known it reports true.
func (p *Pools) Available(backends []string) (ok bool, retryAfter time.Duration) {
	now := p.clock.Now()
	in := pickInput{now: now, nowSec: now.Unix(), pol: p.pol.Load()}
	in.enforceWindow = p.limiter == nil || in.now.UnixNano() < p.limiterDown.Load()
	req := PickRequest{Attempt: 1}
	known := false
	best := time.Duration(-1)
	for _, name := range backends {
		kp := p.pool(name)
		if kp == nil {
			continue
		}
		known = true
		kp.mu.Lock()
		for _, k := range kp.keys {
			if k.cfg.Weight > 0 && kp.eligible(&in, &req, k) {
				kp.mu.Unlock()
				return true, 0
			}
		}
		ra := kp.retryAfterLocked(&in, &req)
		kp.mu.Unlock()
		if best < 0 || ra < best {
			best = ra
		}
	}
	if !known {
		return true, 0
	}
	return false, best
}

// Run shares state through Redis (when configured) and turns the end of
// open periods into health changes. It returns when ctx is done.
func (p *Pools) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if p.sync != nil {
		p.sync.run(ctx, &wg)
	}
	for {
		soonest := p.refresh()
		wait := p.pol.Load().syncInterval
		if !soonest.IsZero() {
			wait = min(wait, max(soonest.Sub(p.clock.Now()), time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			wg.Wait()
			return nil
		case <-t.C:
		case <-p.rearm:
			t.Stop()
		}
	}
}
