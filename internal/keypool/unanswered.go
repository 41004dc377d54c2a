package keypool

import (
	"context"
	"sync"
	"time"
)

// Attempts that end without response headers.
//
// Envoy ends an upstream attempt's ext_proc stream the same way whether the
// upstream reset or refused the connection, or the router cancelled the
// attempt because its client went away: the stream closes and no response
// headers come. Only the first is the key's failure. Counting client
// cancels as resets lets a swarm that cancels its calls in flight (a
// planner giving up, clients timing out, a deploy draining) open every key
// of a backend, refuse all traffic for the cooldown and fail the backend
// over for nothing.
//
// The router-level stream of the same request tells the two apart: it ends
// without response headers only when the client went away (an upstream
// failure reaches it as Envoy's own 503 or as a retry's answer). So an
// unanswered attempt frees its in-flight slot and marks the key tried for
// its request at once, and waits breaker.reset_grace for a Cancelled of
// that request, on this replica or, through Redis, on another one; without
// one it counts as a reset. Redis unreachable: only this replica's cancels
// are known, and the others count as resets (the behaviour without a
// grace).

// resetOutcome is an unanswered attempt counted against its key: a reset,
// with nothing known of the provider's remaining quota.
var resetOutcome = Outcome{Reset: true, RemainingRequests: -1, RemainingTokens: -1}

// Verdicts of unanswered attempts (metric label).
const (
	verdictReset     = "reset"
	verdictCancelled = "cancelled"
)

// unanswered holds the attempts waiting for their verdict, and the requests
// whose client went away.
type unanswered struct {
	mu      sync.Mutex
	pending []pendingVerdict // in order of due time
	timer   *time.Timer      // nil until the first wait
	armed   bool
	cancels requestSet
	// stopped is set when Pools.Run ends: no verdict runs after it (the
	// Redis client and the metrics it uses may be gone); running is the
	// verdict pass in progress, which the stop waits for.
	stopped bool
	running sync.WaitGroup
}

type pendingVerdict struct {
	backend, keyID, req string
	due                 time.Time
}

// cancelTTL is how long a cancel is remembered: well past the grace of the
// attempts that were in flight with it.
func cancelTTL(grace time.Duration) time.Duration { return max(10*time.Second, 4*grace) }

// Unanswered feeds an attempt that ended without response headers. The
// in-flight slot is freed and the key is not tried again by the same
// request; whether it counts as a reset against the key is decided after
// breaker.reset_grace (see Cancelled). Like Report, it works on any replica.
func (p *Pools) Unanswered(ctx context.Context, backend, keyID, requestID string) error {
	kp, k, err := p.key(backend, keyID)
	if err != nil {
		return err
	}
	grace := p.pol.Load().resetGrace
	if grace <= 0 || requestID == "" {
		kp.observe(k, requestID, resetOutcome, true, false)
		p.metrics.unanswered.WithLabelValues(backend, verdictReset).Inc()
		return nil
	}
	kp.observe(k, requestID, Outcome{}, true, false) // frees the slot only
	kp.markTried(k, requestID)
	u := &p.unanswered
	u.mu.Lock()
	if u.cancels.has(requestID, time.Now()) {
		u.mu.Unlock()
		p.metrics.unanswered.WithLabelValues(backend, verdictCancelled).Inc()
		return nil
	}
	u.pending = append(u.pending, pendingVerdict{backend: backend, keyID: keyID, req: requestID, due: time.Now().Add(grace)})
	p.armLocked(grace)
	u.mu.Unlock()
	return nil
}

// Cancelled records that the client of a request went away before any
// response headers: the request's attempts that end unanswered are not the
// keys' failures. Other replicas learn it through Redis.
func (p *Pools) Cancelled(requestID string) {
	if requestID == "" {
		return
	}
	ttl := cancelTTL(p.pol.Load().resetGrace)
	u := &p.unanswered
	u.mu.Lock()
	u.cancels.add(requestID, time.Now(), ttl)
	u.mu.Unlock()
	if p.sync != nil {
		p.sync.addCancel(requestID)
	}
}

// armLocked starts the verdict timer unless it runs. u.mu is held.
func (p *Pools) armLocked(d time.Duration) {
	u := &p.unanswered
	if u.armed || u.stopped {
		return
	}
	u.armed = true
	if u.timer == nil {
		u.timer = time.AfterFunc(d, p.settleUnanswered)
		return
	}
	u.timer.Reset(d)
}

// settleUnanswered decides the attempts whose grace is over: cancelled ones
// go, the others count as resets. Cancels of other replicas are read from
// Redis in one pipelined round trip.
func (p *Pools) settleUnanswered() {
	u := &p.unanswered
	now := time.Now()
	u.mu.Lock()
	if u.stopped {
		u.mu.Unlock()
		return
	}
	u.running.Add(1)
	defer u.running.Done()
	n := 0
	for n < len(u.pending) && !u.pending[n].due.After(now) {
		n++
	}
	due := make([]pendingVerdict, 0, n)
	for _, v := range u.pending[:n] {
		if u.cancels.has(v.req, now) {
			p.metrics.unanswered.WithLabelValues(v.backend, verdictCancelled).Inc()
			continue
		}
		due = append(due, v)
	}
	u.pending = append(u.pending[:0], u.pending[n:]...)
	u.armed = false
	if len(u.pending) > 0 {
		p.armLocked(max(time.Millisecond, u.pending[0].due.Sub(now)))
	}
	u.mu.Unlock()

	var remote []bool
	if p.sync != nil && len(due) > 0 {
		reqs := make([]string, len(due))
		for i, v := range due {
			reqs[i] = v.req
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.pol.Load().readTimeout)
		remote = p.sync.cancelled(ctx, reqs)
		cancel()
	}
	for i, v := range due {
		if remote != nil && remote[i] {
			p.metrics.unanswered.WithLabelValues(v.backend, verdictCancelled).Inc()
			continue
		}
		p.metrics.unanswered.WithLabelValues(v.backend, verdictReset).Inc()
		if kp, k, err := p.key(v.backend, v.keyID); err == nil { // else removed by a reload meanwhile
			kp.observe(k, v.req, resetOutcome, false, false)
		}
	}
}

// stopUnanswered ends the verdict timer when Pools.Run ends and waits for a
// verdict pass already under way; attempts still pending get no verdict.
func (p *Pools) stopUnanswered() {
	u := &p.unanswered
	u.mu.Lock()
	u.stopped = true
	if u.timer != nil {
		u.timer.Stop()
	}
	u.mu.Unlock()
	u.running.Wait()
}

// requestSet is a set of request ids that forgets each after one to two
// TTLs, in two generations like triedTable: no per-entry timers or scans.
type requestSet struct {
	cur, prev map[string]struct{}
	rotateAt  time.Time
	gen       time.Duration
}

func (s *requestSet) add(req string, now time.Time, ttl time.Duration) {
	s.gen = ttl
	if s.cur == nil {
		s.cur, s.prev = map[string]struct{}{}, map[string]struct{}{}
		s.rotateAt = now.Add(ttl)
	}
	s.rotate(now)
	s.cur[req] = struct{}{}
}

func (s *requestSet) has(req string, now time.Time) bool {
	s.rotate(now)
	_, a := s.cur[req]
	_, b := s.prev[req]
	return a || b
}

func (s *requestSet) rotate(now time.Time) {
	if s.cur == nil || now.Before(s.rotateAt) {
		return
	}
	clear(s.prev)
	if !now.Before(s.rotateAt.Add(s.gen)) {
		clear(s.cur) // idle for a whole generation: everything is stale
	}
	s.cur, s.prev = s.prev, s.cur
	s.rotateAt = now.Add(s.gen)
}
