package keypool

import (
	"sync/atomic"
	"time"
)

// Pace is the rate the usable keys of backends can take: requests and
// tokens per second, the sums of their per-minute limits (the lower of the
// configured rpm/tpm and the limits the provider states on its answers,
// limits.go) over the keys that are serving. 0 when a serving key has no
// such limit (it can take more than any sum says) or none serves: the
// admission queue then does not pace by it. Keys that
// trip add nothing, so a failing key slows the pace at once and one that
// comes back adds its share back without a burst: the admission order
// spaces requests at the new rate across every replica.
func (p *Pools) Pace(backends []string) (requests, tokens float64) {
	now := p.clock.Now()
	rpm, tpm := 0, 0
	rpmUnknown, tpmUnknown := false, false
	var picks, retries int64
	for _, name := range backends {
		kp := p.pool(name)
		if kp == nil {
			continue
		}
		pk, rt := kp.mix.counts(now)
		picks, retries = picks+pk, retries+rt
		kp.mu.Lock()
		if held, _ := kp.damper.heldDown(now); !held {
			for _, k := range kp.keys {
				if k.cfg.Weight > 0 && k.serving(now) {
					r, t := k.rpm(), k.tpm()
					rpm, tpm = rpm+r, tpm+t
					rpmUnknown, tpmUnknown = rpmUnknown || r == 0, tpmUnknown || t == 0
				}
			}
		}
		kp.mu.Unlock()
	}
	if rpmUnknown {
		rpm = 0
	}
	if tpmUnknown {
		tpm = 0
	}
	// The keys' rate goes to attempts; Envoy's retries (a flaky key's
	// 5xx, a reset) take their share of it before the next request. Only
	// these backends' retries: another model's flaky keys do not slow
	// this one's admissions.
	first := 1 - retryShare(picks, retries)
	return admitShare * first * float64(rpm) / 60, admitShare * first * float64(tpm) / 60
}

// admitShare is the part of the keys' stated limits admission paces to,
// below keyPaceShare: each key's own pace (keypace.go) must have room for
// what admission lets through, or its picks' waits grow without bound
// whenever the two paces drift apart (one spaces admissions, the other
// attempts; measured: 36 picks of 1,988 waited their whole bound and went
// on without a slot in the 500-agent at-capacity run with both at 95 %).
const admitShare = 0.92

// attemptMix counts this replica's picks of one backend's keys and, of
// those, retries (Attempt > 1) over the last 10-20 s, in two generations
// rotated every 10 s. Without picks (a replica that runs only the
// router-level filter) the share is 0.
type attemptMix struct {
	picks, retries         atomic.Int64 // current generation
	prevPicks, prevRetries atomic.Int64
	// refusals are answers that were a key's short refusal (refusal.go):
	// their retries take no more of the keys' windows than the refused
	// attempt did (a refusal is not counted in the provider's window), so
	// they are not retries the pace must leave room for.
	refusals, prevRefusals atomic.Int64
	rotateAt               atomic.Int64 // unix nanos
}

const mixPeriod = 10 * time.Second

func (m *attemptMix) add(attempt int) {
	m.picks.Add(1)
	if attempt > 1 {
		m.retries.Add(1)
	}
}

// counts rotates the generations when due and returns the picks and the
// retries that take window (those after a short refusal left out) over
// the last 10-20 s. The retries may be negative: a refusal is counted on
// the refusing key's backend, its retry on the backend Envoy sends it to,
// so only a set's sum says what its keys' windows lost.
func (m *attemptMix) counts(now time.Time) (picks, retries int64) {
	if at := m.rotateAt.Load(); now.UnixNano() >= at && m.rotateAt.CompareAndSwap(at, now.Add(mixPeriod).UnixNano()) {
		m.prevPicks.Store(m.picks.Swap(0))
		m.prevRetries.Store(m.retries.Swap(0))
		m.prevRefusals.Store(m.refusals.Swap(0))
	}
	picks = m.picks.Load() + m.prevPicks.Load()
	retries = m.retries.Load() + m.prevRetries.Load() - m.refusals.Load() - m.prevRefusals.Load()
	return picks, retries
}

// retryShare is the share of picks that were retries, at most 1/2; 0
// below 20 picks (too few to say).
func retryShare(picks, retries int64) float64 {
	if picks < 20 {
		return 0
	}
	return min(float64(max(retries, 0))/float64(picks), 0.5)
}

// refused counts one short refusal.
func (m *attemptMix) refused() { m.refusals.Add(1) }

// paceShare is the part of the stated limits each key's own pace uses
// (keyPaceShare); admission paces below it (admitShare). Providers
// enforce per-minute limits in short quantized windows (OpenAI: a second),
// and each replica's key rotation spreads admitted requests over the keys
// only on average, so pacing at 100 % lets some key see one request more
// than its window holds: 2.7 % of upstream requests were 429s in the
// 500-agent TestSwarmOverCapacity run at 100 %.
const paceShare = 0.95

// serving reports whether the key is part of its backend's capacity now:
// not open, or open only until its provider window resets (ReasonQuota:
// remaining 0, or one 429 with Retry-After). Such a key is resting, not
// failing. Counting it out made providers' quantized windows (one second)
// flip the backend's EDS health every window, so the health damper held
// the backend down for whole seconds, and slowed the pace each time a key
// used its window (the GCRA spaces admissions at the rate in force when
// each was admitted, carrying the slowdown on after the key came back):
// about half the keys' capacity lost in TestSwarmOverCapacity. Keys open
// for failures, 429 streaks or refused credentials are out.
func (k *keyState) serving(now time.Time) bool {
	return k.br.State(now) != Open || k.br.reason == ReasonQuota
}
