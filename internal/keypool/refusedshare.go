package keypool

import (
	"strconv"
	"strings"
	"time"
)

// Shared refused shares.
//
// A key's refused share (refusal.go) is a moving average of the answers
// this replica saw. The capacity weights (capacity.go) are computed by the
// control plane's replica, which in a split deployment (a control plane
// beside `extproc --from-xds` replicas) picks no key and sees no answer:
// it weighted a relay whose key refused half its requests by that key's
// window alone. With admission.capacity_weights, a replica whose key's
// capacity moves (capacityStep) writes the key's share to the hash
// <prefix>keypool:refused (field backend|key, value the share), and every
// replica reads it with the learned limits on its breaker poll, adopting
// it for keys it has not heard from itself within refusedOwnFor.

// refusedKey is the hash of shared refused shares under the prefix.
func refusedKey(prefix string) string { return prefix + "keypool:refused" }

// refusedOwnFor: a replica that had one of the key's answers within this
// long keeps its own share.
const refusedOwnFor = 10 * time.Second

// publishRefused queues the write of a key's refused share.
func (s *syncer) publishRefused(backend, key string, share float64) {
	op := syncOp{backend: backend, key: key, refused: strconv.FormatFloat(share, 'f', 4, 64), seq: s.seq.Add(1)}
	select {
	case s.queue <- op:
	default:
		s.p.metrics.syncDropped.Inc()
		s.keepPending([]syncOp{op})
	}
}

// adoptRefused applies the refused shares other replicas wrote to the keys
// this replica has not heard from lately.
func (p *Pools) adoptRefused(all map[string]string) {
	now := p.clock.Now()
	changed := false
	for field, v := range all {
		backend, key, ok := strings.Cut(field, "|")
		share, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || share < 0 || share > 1 {
			continue
		}
		changed = p.withKey(backend, key, func(k *keyState) bool {
			if now.Sub(k.answeredAt) <= refusedOwnFor {
				return false
			}
			k.refused = share
			return k.capacityMovedLocked()
		}) || changed
	}
	if changed {
		p.signal() // BackendCapacity moved
	}
}
