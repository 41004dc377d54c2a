package keypool

import (
	"math"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// BackendCapacity reports, per backend, what its keys can take as the pace
// knows them: each key's requests per minute (the lower of its configured
// rpm and the limit its provider states, a shorter window's limit at its
// rate per minute) scaled up by the attempts its short refusals take
// (refusal.go), and the part of those attempts refused. The control plane
// weights a pool's targets by it, so Envoy's split between relays follows
// what each can serve: admission paces to the keys' sum, and a split by
// the targets' static weights alone sends a relay with less capacity than
// its share more than it can serve while another's keys idle. A backend
// with a key of unknown limit is absent (its weight stays the configured
// one), and every backend is unless admission.capacity_weights and
// admission.pace are on.
func (p *Pools) BackendCapacity() map[string]contract.Capacity {
	if !p.pol.Load().capacity {
		return nil
	}
	pools := *p.pools.Load()
	out := make(map[string]contract.Capacity, len(pools))
	for name, kp := range pools {
		kp.mu.Lock()
		c, known := kp.capacityLocked()
		kp.mu.Unlock()
		if known {
			out[name] = c
		}
	}
	return out
}

// capacityLocked sums the keys' capacity; known is false when a key's
// limit is not. Caller holds kp.mu.
func (kp *KeyPool) capacityLocked() (c contract.Capacity, known bool) {
	for _, k := range kp.keys {
		if k.cfg.Weight <= 0 {
			continue
		}
		a, r := k.capacity()
		if a <= 0 {
			return contract.Capacity{}, false
		}
		c.Attempts, c.Refused, known = c.Attempts+a, c.Refused+r, true
	}
	return c, known
}

// capacity is the key's attempts per minute and the refused part of them
// (0, 0 with no known limit). Caller holds kp.mu.
func (k *keyState) capacity() (attempts, refused float64) {
	rpm := k.rpm()
	if rpm <= 0 {
		return 0, 0
	}
	// The refused share is this replica's view of the key's answers
	// (not shared through Redis, unlike the limits).
	r := min(k.refused, refusedBoost)
	attempts = float64(rpm) / (1 - r)
	return attempts, attempts * r
}

// capacityMovedLocked reports whether the key's capacity moved by more
// than capacityStep since it last did (each report signals the control
// plane, which re-reads BackendCapacity). Caller holds kp.mu.
func (k *keyState) capacityMovedLocked() bool {
	a, r := k.capacity()
	if math.Abs(a-k.signalledAttempts) <= capacityStep*k.signalledAttempts &&
		math.Abs(r-k.signalledRefused) <= capacityStep*max(k.signalledAttempts, 1) {
		return false
	}
	k.signalledAttempts, k.signalledRefused = a, r
	return true
}

// capacityStep: a key's capacity moving less than this share of it does
// not signal; a refusing key's share moves a little with every answer.
const capacityStep = 0.1
