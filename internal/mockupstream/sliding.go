package mockupstream

import (
	"net/http"
	"strconv"
	"time"
)

// SlidingWindow limits a key the way providers state request limits in
// the OpenAI style: at most Limit requests in any Window (a sliding log,
// not a fixed window), with x-ratelimit-limit-requests: Limit (the window's
// own figure, not a per-minute one), -remaining-requests: what is left in
// the window now and -reset-requests: when the window is back to its
// initial state (the newest counted request leaves it; "10s", "6s"). A
// request beyond the limit is a 429 with Retry-After until the oldest
// counted request leaves the window.
//
// RefuseShare makes the key refuse that share of the requests it would
// serve with 429 and Retry-After: RefuseRetryAfter (default 1 s), the
// window's headers unchanged: a key whose provider sheds part of its load
// (an overloaded region, a shared org limit) while its own window has room.
// Refused requests do not count in the window.
type SlidingWindow struct {
	Limit            int
	Window           time.Duration
	RefuseShare      float64
	RefuseRetryAfter time.Duration
}

// slidingLog is one key's requests in its window, oldest first.
type slidingLog struct{ at []time.Time }

func (l *slidingLog) trim(now time.Time, w time.Duration) {
	i := 0
	for i < len(l.at) && !now.Before(l.at[i].Add(w)) {
		i++
	}
	l.at = l.at[i:]
}

// admitSliding applies b.Sliding to one request of keyID. Caller holds
// s.mu. It returns the outcome name of a refusal ("" when served) and sets
// the window's headers, and Retry-After on a refusal.
func (s *Server) admitSliding(keyID string, sw *SlidingWindow, h http.Header) string {
	if s.sliding == nil {
		s.sliding = map[string]*slidingLog{}
	}
	l := s.sliding[keyID]
	if l == nil {
		l = &slidingLog{}
		s.sliding[keyID] = l
	}
	now := s.opts.Now()
	l.trim(now, sw.Window)
	limited := ""
	switch {
	case len(l.at) >= sw.Limit:
		limited = "rpm_limit"
		h.Set("Retry-After", strconv.Itoa(retryAfterSeconds(l.at[0].Add(sw.Window).Sub(now))))
	case sw.RefuseShare > 0 && s.rng.Float64() < sw.RefuseShare:
		limited = "rate_limit"
		h.Set("Retry-After", strconv.Itoa(retryAfterSeconds(sw.RefuseRetryAfter)))
	default:
		l.at = append(l.at, now)
	}
	h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(sw.Limit))
	h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(max(0, sw.Limit-len(l.at))))
	reset := time.Duration(0)
	if n := len(l.at); n > 0 {
		reset = l.at[n-1].Add(sw.Window).Sub(now)
	}
	h.Set("X-Ratelimit-Reset-Requests", formatReset(reset))
	return limited
}
