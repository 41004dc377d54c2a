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
// or BackendCapacity may have changed. It has one consumer: the control
// plane.
func (p *Pools) Changes() <-chan struct{} { return p.changes }

// BackendHealth reports, per backend, whether some key is not open. A
// backend whose keys are all open is unhealthy until the soonest open
// period ends: then its keys are half-open and it is reported healthy again
// so EDS sends the traffic a probe needs. Going unhealthy is reported at
// once; coming back is held down (healthDamper), so a flaky key cannot
// make the control plane push EDS to the fleet every second.
func (p *Pools) BackendHealth() map[string]bool {
	now := p.clock.Now()
	pools := *p.pools.Load()
	out := make(map[string]bool, len(pools))
	for name, kp := range pools {
		kp.mu.Lock()
		kp.refreshLocked(now)
		out[name] = kp.healthy
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
	in := pickInput{now: now, nowSec: now.Unix(), pol: p.pol.Load(), replicas: p.replicas()}
	in.enforceWindow = p.limiter == nil || in.now.UnixNano() < p.limiterDown.Load()
	req := PickRequest{Attempt: 1}
	known, flipped := false, false
	best := time.Duration(-1)
	defer func() {
		if flipped {
			p.signal()
		}
	}()
	for _, name := range backends {
		kp := p.pool(name)
		if kp == nil {
			continue
		}
		known = true
		kp.mu.Lock()
		hold, f := kp.edsHoldLocked(now)
		flipped = f || flipped
		if hold > 0 {
			kp.mu.Unlock()
			if best < 0 || hold < best {
				best = hold
			}
			continue
		}
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

// edsHoldLocked refreshes kp's health and reports how long admission must
// still wait for EDS (0: not), and whether the health flipped (the caller
// signals once unlocked). Admission follows what EDS was told: a backend
// reported unhealthy (all keys open, or held down by the damper) gets no
// traffic from Envoy until the control plane has pushed it healthy again,
// so its keys do not make a request admissible, even when one of them has
// just reopened (the refresh here reports that at once). Admitting on the
// keys alone races the push: the request meets Envoy's "no healthy
// upstream". Caller holds kp.mu.
func (kp *KeyPool) edsHoldLocked(now time.Time) (hold time.Duration, flipped bool) {
	flipped = kp.refreshLocked(now)
	settled := kp.damper.upSince.Add(edsSettle)
	if kp.healthy && !now.Before(settled) {
		return 0, flipped
	}
	until := settled
	if !kp.healthy {
		until = kp.backAtLocked(now)
	}
	return max(until.Sub(now), time.Millisecond), flipped
}

// KeyAvailable is Available for one key of backend: a request pinned to
// the key that holds its previous response (a Responses follow-up) can use
// no other. ok: the key can take it now; else retryAfter is how soon it
// may, and failing that it is open because it failed (5xx, resets, refused
// credentials), which does not come back by waiting. An unknown backend or
// key is failing.
func (p *Pools) KeyAvailable(backend, key string) (ok bool, retryAfter time.Duration, failing bool) {
	kp := p.pool(backend)
	if kp == nil {
		return false, time.Second, true
	}
	now := p.clock.Now()
	in := pickInput{now: now, nowSec: now.Unix(), pol: p.pol.Load(), replicas: p.replicas()}
	in.enforceWindow = p.limiter == nil || in.now.UnixNano() < p.limiterDown.Load()
	req := PickRequest{Attempt: 1, Key: key}
	kp.mu.Lock()
	hold, flipped := kp.edsHoldLocked(now)
	ok, retryAfter, failing = kp.keyAvailableLocked(&in, &req, hold)
	kp.mu.Unlock()
	if flipped {
		p.signal()
	}
	return ok, retryAfter, failing
}

// keyAvailableLocked is KeyAvailable's answer for req.Key once the
// backend's EDS hold is known (as Available, a backend EDS does not route
// to yet makes no key of it available). Caller holds kp.mu.
func (kp *KeyPool) keyAvailableLocked(in *pickInput, req *PickRequest, hold time.Duration) (ok bool, retryAfter time.Duration, failing bool) {
	for _, k := range kp.keys {
		if k.cfg.ID != req.Key || k.cfg.Weight <= 0 {
			continue
		}
		failing = k.br.State(in.now) == Open && (k.br.reason == ReasonFailures || k.br.reason == ReasonAuth)
		switch {
		case hold > 0:
			return false, hold, failing
		case kp.eligible(in, req, k):
			return true, 0, false
		}
		return false, kp.retryAfterLocked(in, req), failing
	}
	return false, time.Second, true
}

// Failing reports whether every key of every known backend is open because
// it failed (5xx, resets, refused credentials), not because it is rate
// limited, out of quota or busy: the difference between a 503 and a 429
// with Retry-After for the client.
func (p *Pools) Failing(backends []string) bool {
	now := p.clock.Now()
	known := false
	for _, name := range backends {
		kp := p.pool(name)
		if kp == nil {
			continue
		}
		known = true
		kp.mu.Lock()
		f := kp.failingLocked(now)
		kp.mu.Unlock()
		if !f {
			return false
		}
	}
	return known
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
			p.stopUnanswered()
			wg.Wait()
			return nil
		case <-t.C:
		case <-p.rearm:
			t.Stop()
		}
	}
}

// edsSettle is how long a backend reported healthy again waits before it
// admits requests: the control plane's EDS push must reach Envoy first,
// or the request meets "no healthy upstream".
const edsSettle = 200 * time.Millisecond

// freeFlips is how many times a backend may go down within the flap
// window before coming back is held.
const freeFlips = 2

// heldDown reports whether the damper keeps the backend reported unhealthy
// at now, and until when.
func (d *healthDamper) heldDown(now time.Time) (bool, time.Time) {
	at := d.releaseAt()
	return d.down && now.Before(at), at
}

// healthPolicy is breaker.health_hold and health_flap_window.
type healthPolicy struct {
	hold, maxHold, window time.Duration
}

// healthDamper is the hysteresis between a backend's raw health (some key
// not open) and what the control plane pushes to Envoy. A backend goes
// unhealthy at once (fail over fast) and, the first times, comes back as
// soon as a key is usable again. Once it flaps (freeFlips downs within
// health_flap_window) it is reported healthy again only after a hold that
// starts at health_hold and doubles with each further down, capped at
// max_cooldown: a flaky key cannot make the fleet churn, and a backend that
// trips now and then is not kept from traffic it could serve.
//
// A down where every key rests on the provider's rate limit (quota,
// Retry-After, 429s) is not a flap: it is not counted and not held, so the
// backend comes back exactly when the soonest of its keys reopens at the
// reset the provider stated (the raw health already waits for it). A
// backend that runs out every one-second quota window would otherwise be
// held down for seconds while its keys could serve; failures keep the hold.
// Guarded by the KeyPool's mutex.
type healthDamper struct {
	down      bool      // reported unhealthy
	downSince time.Time // when it went down
	upSince   time.Time // when it was last reported healthy again
	hold      time.Duration
	flips     []time.Time // times it went down, within the window
}

// report folds the raw health observed at now into the reported one.
// resting says an unhealthy backend's keys all wait for the provider's
// reset (restingLocked).
func (d *healthDamper) report(now time.Time, raw, resting bool, p *healthPolicy) bool {
	switch {
	case !d.down && !raw && resting:
		d.down, d.downSince, d.hold = true, now, 0
	case !d.down && !raw:
		d.down, d.downSince = true, now
		kept := d.flips[:0]
		for _, t := range d.flips {
			if now.Sub(t) < p.window {
				kept = append(kept, t)
			}
		}
		d.flips = append(kept, now)
		d.hold = 0
		if n := len(d.flips); n > freeFlips {
			d.hold = p.hold
			for i := freeFlips + 1; i < n && d.hold < p.maxHold; i++ {
				d.hold *= 2
			}
			d.hold = min(d.hold, p.maxHold)
		}
	case d.down && raw && !now.Before(d.downSince.Add(d.hold)):
		d.down, d.upSince = false, now
	}
	return !d.down
}

// releaseAt is when a held-down backend may be reported healthy again
// (zero when it is not held down).
func (d *healthDamper) releaseAt() time.Time {
	if !d.down {
		return time.Time{}
	}
	return d.downSince.Add(d.hold)
}
