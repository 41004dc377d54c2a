package keypool

// swrr is one step of nginx's smooth weighted round robin
// (ngx_http_upstream_get_peer): every eligible peer's current weight grows by
// its weight, the largest current weight wins and is lowered by the total.
// Ineligible peers neither gain nor lose, exactly as nginx skips down peers.
// Eligibility is precomputed in keyState.ok. For weights 5/1/1 it yields a a b a c a a. Ties go to the first peer, so
// the sequence is deterministic.
func swrr(keys []*keyState) *keyState {
	var best *keyState
	total := 0
	for _, k := range keys {
		if !k.ok {
			continue
		}
		k.current += k.cfg.Weight
		total += k.cfg.Weight
		if best == nil || k.current > best.current {
			best = k
		}
	}
	if best != nil {
		best.current -= total
	}
	return best
}
