package keypool

import "math"

// Sticky sessions use weighted rendezvous hashing: every key gets the score
// weight / -ln(u), u a hash of (session, key id) in (0,1); the best eligible
// key wins. All replicas compute the same order without shared state, a
// session moves only when its key is unusable, and adding or removing a key
// moves only the sessions of that key.

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix64 is splitmix64's finaliser: spreads (session ^ key) over 64 bits.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func rendezvousScore(session, key uint64, weight int) float64 {
	u := (float64(mix64(session^key)>>11) + 0.5) / (1 << 53) // in (0,1)
	return float64(weight) / -math.Log(u)
}

// stickyPick returns the eligible key with the best score for session.
func stickyPick(keys []*keyState, session uint64) *keyState {
	var best *keyState
	bestScore := -1.0
	for _, k := range keys {
		if !k.ok {
			continue
		}
		if s := rendezvousScore(session, k.hash, k.cfg.Weight); s > bestScore {
			best, bestScore = k, s
		}
	}
	return best
}
