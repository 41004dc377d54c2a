package keypool

import (
	"net/http"
	"time"
)

// Short refusals.
//
// Some keys refuse part of their requests while their window has room
// (an overloaded region, an organisation's shared limit): 429 with a
// short Retry-After while the answer states requests remaining in the
// window (above 0; a 429 that states nothing, or 0, is the window's end
// and holds the key as before). Counting those toward
// the 429 streak, or opening the key for each Retry-After, parked a key
// that refused half its requests for most of a run (it served 9 requests
// where its window allowed hundreds). Such a refusal is the provider's
// pace: the request retries on another key (the key is marked tried for
// it), the breaker does not see it, and the key's own pace (keypace.go)
// offers it more attempts, so that its accepted share fills its window.
// A key that refuses nearly everything is failing, not pacing: beyond
// refusedPark its refusals count as before.

const (
	// shortRefusal is the longest Retry-After read as the provider's pace.
	shortRefusal = 2 * time.Second
	// refusedAlpha is the weight of one answer in the refused share.
	refusedAlpha = 0.05
	// refusedPark: refusing a larger share, the key's 429s count again.
	refusedPark = 0.9
	// refusedBoost caps how many more attempts a refusing key is offered
	// (1/(1-0.75) = 4x its window's rate).
	refusedBoost = 0.75
)

// isShortRefusal: a 429 with a short Retry-After that says the key's
// window has requests left.
func (o Outcome) isShortRefusal() bool {
	return o.Status == http.StatusTooManyRequests && o.RetryAfter > 0 && o.RetryAfter <= shortRefusal &&
		o.RemainingRequests > 0 && o.RemainingTokens != 0
}

// noteRefusal updates the key's refused share with answer o and reports
// whether o is a refusal the breaker must not count. Caller holds kp.mu.
func (k *keyState) noteRefusal(o Outcome) bool {
	switch {
	case o.isShortRefusal():
		k.refused += refusedAlpha * (1 - k.refused)
		return k.refused < refusedPark
	case o.class() == classSuccess:
		k.refused -= refusedAlpha * k.refused
	}
	return false
}

// attemptFactor scales the key's pace interval: below 1 for a key that
// refuses part of its requests, so its accepted attempts fill its window.
func (k *keyState) attemptFactor() float64 { return 1 - min(k.refused, refusedBoost) }
