package keypool

import (
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

// State is a breaker state.
type State int

const (
	Closed   State = iota // traffic flows
	Open                  // no traffic until the open period ends
	HalfOpen              // open period over: one probe at a time
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "unknown"
}

// Reason says why a breaker is open.
type Reason string

const (
	ReasonNone        Reason = ""
	ReasonRateLimited Reason = "429"   // Consecutive429 rate-limit answers
	ReasonFailures    Reason = "5xx"   // Consecutive5xx server errors or resets
	ReasonAuth        Reason = "auth"  // one 401/403: revoked, mistyped or no access
	ReasonQuota       Reason = "quota" // remaining-* of 0, or one 429 with Retry-After
)

// breakerPolicy is config.BreakerPolicy in the form the hot path uses.
type breakerPolicy struct {
	n429, n5xx            int
	cooldown, maxCooldown time.Duration
	jitter                float64
	honourRemaining       bool
	probeTTL              time.Duration // a probe without an answer frees its slot after this
	authCooldown          time.Duration
}

func newBreakerPolicy(b config.BreakerPolicy, probeTTL time.Duration) breakerPolicy {
	return breakerPolicy{
		n429: max(b.Consecutive429, 1), n5xx: max(b.Consecutive5xx, 1),
		cooldown: b.Cooldown.D(), maxCooldown: max(b.MaxCooldown.D(), b.Cooldown.D()),
		jitter: b.Jitter, honourRemaining: b.HonourRemaining, probeTTL: probeTTL,
		authCooldown: max(b.AuthCooldown.D(), b.Cooldown.D()),
	}
}

// Breaker is one key's circuit breaker:
//
//	closed --N consecutive 429s or 5xx/resets--> open (cooldown·2^(trips-1), capped, ≥ Retry-After, + jitter)
//	open --period over--> half-open --probe succeeds--> closed
//	                      half-open --probe fails--> open (next, longer period)
//	closed --remaining 0 / one 429 with Retry-After--> open (quota) --reset time--> closed
//
// Half-open is derived from time: an open breaker whose period is over. A
// quota opening ends in closed without a probe, because the provider told us
// when its window resets. Breaker is not safe for concurrent use; its
// KeyPool's mutex guards it.
type Breaker struct {
	open          bool
	reason        Reason
	until         time.Time
	trips         int // consecutive trips, for the exponential open period
	fails429      int
	fails5xx      int
	probeOut      bool
	probeDeadline time.Time
	// changed is the time of the last transition, local or adopted from
	// another replica; newer transitions win (last writer wins).
	changed time.Time
}

// State returns the state at now.
func (b *Breaker) State(now time.Time) State {
	switch {
	case !b.open:
		return Closed
	case now.Before(b.until):
		return Open
	case b.reason == ReasonQuota:
		return Closed
	default:
		return HalfOpen
	}
}

// OpenUntil is the end of the current open period (zero when closed).
func (b *Breaker) OpenUntil() time.Time {
	if !b.open {
		return time.Time{}
	}
	return b.until
}

// normalize folds an expired quota opening back into closed.
func (b *Breaker) normalize(now time.Time) {
	if b.open && b.reason == ReasonQuota && !now.Before(b.until) {
		b.open, b.reason, b.until = false, ReasonNone, time.Time{}
	}
}

// allow reports whether a pick may use the key now (no side effect).
func (b *Breaker) allow(now time.Time) bool {
	switch b.State(now) {
	case Closed:
		return true
	case HalfOpen:
		return !b.probeOut || !now.Before(b.probeDeadline)
	}
	return false
}

// acquire marks a pick admitted by allow; it reports whether it is the probe.
func (b *Breaker) acquire(now time.Time, p *breakerPolicy) (probe bool) {
	b.normalize(now)
	if b.State(now) != HalfOpen {
		return false
	}
	b.probeOut, b.probeDeadline = true, now.Add(p.probeTTL)
	return true
}

// releaseProbe frees the probe slot of a pick that produced no outcome.
func (b *Breaker) releaseProbe() { b.probeOut = false }

// observe feeds one outcome. jitter is a uniform random number in [0,1). It
// reports whether the breaker changed state or open period (to be shared).
func (b *Breaker) observe(now time.Time, o Outcome, p *breakerPolicy, jitter float64) bool {
	b.normalize(now)
	st := b.State(now)
	changed := false
	switch o.class() {
	case classNone:
		return false
	case classSuccess:
		b.fails429, b.fails5xx = 0, 0
		if st == HalfOpen {
			b.close(now)
			changed = true
		}
	case classRateLimited:
		if st != Open {
			// A 429 to an attempt that left before the key was held
			// says nothing new: a swarm's attempts in flight when a
			// window fills otherwise made a streak that tripped the key
			// for the cooldown at its next 429.
			b.fails429++
		}
		hold := o.hold()
		switch {
		case st == HalfOpen, st == Closed && b.fails429 >= p.n429:
			b.trip(now, hold, ReasonRateLimited, p, jitter)
			changed = true
		case st == Closed && hold > 0:
			// The provider said when this key may be used again: honour it
			// now instead of sending N more requests into a known 429.
			changed = b.quota(now, now.Add(hold))
		case st == Open && hold > 0 && now.Add(hold).After(b.until):
			b.until, b.changed, changed = now.Add(hold), now, true
		}
	case classAuth:
		// One refusal is enough: the provider says the credential is bad.
		// The open period is long and does not double; a probe after it
		// finds out whether the key was restored.
		if st != Open || b.reason != ReasonAuth {
			b.trips++
			d := max(p.authCooldown, o.RetryAfter)
			d += time.Duration(jitter * p.jitter * float64(d))
			b.open, b.reason, b.until = true, ReasonAuth, now.Add(d)
			b.fails429, b.fails5xx, b.probeOut = 0, 0, false
			b.changed = now
			changed = true
		}
	case classFailure:
		b.fails5xx++
		if st == HalfOpen || st == Closed && b.fails5xx >= p.n5xx {
			b.trip(now, o.RetryAfter, ReasonFailures, p, jitter)
			changed = true
		}
	}
	if p.honourRemaining && b.State(now) == Closed {
		// Stop before the 429: remaining 0 means the next request would be
		// refused until the provider's window resets.
		if o.RemainingRequests == 0 {
			changed = b.quota(now, now.Add(resetOr(o.ResetRequests, p.cooldown))) || changed
		}
		if o.RemainingTokens == 0 {
			changed = b.quota(now, now.Add(resetOr(o.ResetTokens, p.cooldown))) || changed
		}
	}
	return changed
}

func resetOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func (b *Breaker) trip(now time.Time, retryAfter time.Duration, r Reason, p *breakerPolicy, jitter float64) {
	b.trips++
	d := p.cooldown
	for i := 1; i < b.trips && d < p.maxCooldown; i++ {
		d *= 2
	}
	d = min(d, p.maxCooldown)
	d = max(d, retryAfter)
	d += time.Duration(jitter * p.jitter * float64(d))
	b.open, b.reason, b.until = true, r, now.Add(d)
	b.fails429, b.fails5xx = 0, 0
	b.probeOut = false
	b.changed = now
}

// quota opens the key until the provider's reset without counting a trip.
func (b *Breaker) quota(now, until time.Time) bool {
	if !until.After(now) || b.open && !until.After(b.until) {
		return false
	}
	if !b.open {
		b.reason = ReasonQuota
	}
	b.open, b.until, b.changed = true, until, now
	return true
}

func (b *Breaker) close(now time.Time) {
	*b = Breaker{changed: now}
}

// remoteState is a breaker transition as shared between replicas.
type remoteState struct {
	Open   bool
	Reason Reason
	Until  time.Time
	Trips  int
	At     time.Time // when the transition happened at its origin
	// Secret is the secretPrint of the key's secret an auth opening
	// refused; "" for other states and from older releases.
	Secret string
}

func (b *Breaker) export() remoteState {
	return remoteState{Open: b.open, Reason: b.reason, Until: b.until, Trips: b.trips, At: b.changed}
}

// adopt applies another replica's transition if it is newer than ours. It
// reports whether our state changed.
func (b *Breaker) adopt(now time.Time, rs remoteState) bool {
	if !rs.At.After(b.changed) {
		return false
	}
	if rs.Open {
		if !rs.Until.After(now) || b.open && !rs.Until.After(b.until) {
			return false // already over, or we are open longer anyway
		}
		b.open, b.reason, b.until = true, rs.Reason, rs.Until
		b.trips = max(b.trips, rs.Trips)
		b.fails429, b.fails5xx, b.probeOut = 0, 0, false
		b.changed = rs.At
		return true
	}
	if !b.open {
		b.changed = rs.At
		return false
	}
	// Another replica's probe succeeded: the key works again.
	b.close(rs.At)
	return true
}
