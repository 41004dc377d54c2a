package keypool

import (
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Lease is one pick: the key an attempt uses. Release it exactly once, with
// Done when this process sees the attempt's response, or Release when the
// outcome will reach (*Pools).Report instead (maybe on another replica). A
// lease never released frees its in-flight slot after the lease TTL.
type Lease struct {
	Backend string
	KeyID   string
	// Secret is the key's credential; read Secret.Value() to set the header.
	Secret config.Secret
	// Probe is true when this attempt is its key's half-open probe.
	Probe bool
	// Overflow is true when PickRequest.BestEffort gave a half-open key
	// whose probe is already out.
	Overflow bool

	pool   *KeyPool
	key    *keyState
	req    string
	pace   time.Duration // the key's pace interval when this pick took a slot of it
	booked time.Duration // that slot is this far ahead of the pick (this replica's view)
	// drained: the slot is when the key's provider said its window has
	// room again (it had said none remains); the attempt waits at least
	// that long.
	drained time.Duration
	// tokens is what the pick took from the key's tokensLeft, while
	// tokensSeq was the key's; an undo gives it back.
	tokens    int
	tokensSeq uint32
}

// Done releases the lease and feeds its outcome to the key's breaker.
func (l Lease) Done(o Outcome) {
	if l.pool != nil {
		l.pool.observe(l.key, l.req, o, true, l.Probe)
	}
}

// Release frees the in-flight slot without an outcome.
func (l Lease) Release() { l.Done(Outcome{}) }

// leaseKey identifies an in-flight attempt: request id and key. The same
// request never holds the same key twice unless its id is empty.
type leaseKey struct {
	req string
	key *keyState
}

// leaseTable tracks in-flight attempts in two generations so expiry costs
// O(leaked) work: whatever is still in the old generation at rotation is
// older than the TTL and is dropped. An entry lives between ttl and 2·ttl.
type leaseTable struct {
	cur, prev map[leaseKey]leaseVal
	rotateAt  time.Time
}

type leaseVal struct {
	n     int32
	probe bool // one of them is the key's half-open probe
}

func (t *leaseTable) add(k leaseKey, probe bool) {
	if t.cur == nil {
		t.cur, t.prev = map[leaseKey]leaseVal{}, map[leaseKey]leaseVal{}
	}
	v := t.cur[k]
	v.n++
	v.probe = v.probe || probe
	t.cur[k] = v
}

func (t *leaseTable) has(k leaseKey) bool { return t.cur[k].n > 0 || t.prev[k].n > 0 }

// release removes one lease: found is false if it had already expired;
// probe tells whether it was the key's probe.
func (t *leaseTable) release(k leaseKey) (found, probe bool) {
	for _, m := range [2]map[leaseKey]leaseVal{t.cur, t.prev} {
		if v, ok := m[k]; ok {
			if v.n <= 1 {
				delete(m, k)
			} else {
				m[k] = leaseVal{n: v.n - 1}
			}
			return true, v.probe
		}
	}
	return false, false
}

// rotate expires the old generation, calling expire for each leaked lease.
func (t *leaseTable) rotate(now time.Time, ttl time.Duration, expire func(leaseKey, leaseVal)) {
	if now.Before(t.rotateAt) {
		return
	}
	for k, v := range t.prev {
		expire(k, v)
	}
	clear(t.prev)
	if !now.Before(t.rotateAt.Add(ttl)) {
		// Idle for two periods: the current generation is older than ttl too.
		for k, v := range t.cur {
			expire(k, v)
		}
		clear(t.cur)
	}
	t.cur, t.prev = t.prev, t.cur
	t.rotateAt = now.Add(ttl)
}

const maxTried = 8

// triedSet is the keys one request failed on, kept on this replica.
type triedSet struct {
	keys [maxTried]*keyState
	n    uint8
}

func (s *triedSet) add(k *keyState) {
	for _, x := range s.keys[:s.n] {
		if x == k {
			return
		}
	}
	if int(s.n) < maxTried {
		s.keys[s.n] = k
		s.n++
		return
	}
	copy(s.keys[:], s.keys[1:])
	s.keys[maxTried-1] = k
}

// triedTable maps request id to its failed keys, in two generations like
// leaseTable.
type triedTable struct {
	cur, prev map[string]triedSet
	rotateAt  time.Time
}

func (t *triedTable) add(req string, k *keyState) {
	if req == "" {
		return
	}
	if t.cur == nil {
		t.cur, t.prev = map[string]triedSet{}, map[string]triedSet{}
	}
	s, ok := t.cur[req]
	if !ok {
		s = t.prev[req]
	}
	s.add(k)
	t.cur[req] = s
}

func (t *triedTable) contains(req string, k *keyState) bool {
	for _, m := range [2]map[string]triedSet{t.cur, t.prev} {
		if s, ok := m[req]; ok {
			for _, x := range s.keys[:s.n] {
				if x == k {
					return true
				}
			}
		}
	}
	return false
}

func (t *triedTable) rotate(now time.Time, ttl time.Duration) {
	if now.Before(t.rotateAt) {
		return
	}
	clear(t.prev)
	if !now.Before(t.rotateAt.Add(ttl)) {
		clear(t.cur)
	}
	t.cur, t.prev = t.prev, t.cur
	t.rotateAt = now.Add(ttl)
}
