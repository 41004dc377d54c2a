package keypool

import "time"

// Learned windows.
//
// A provider states a key's request limit and when it resets, but not the
// window the limit is for. Read as per minute, a limit stated for a
// 10-second window ("x-ratelimit-limit-requests: 60",
// "x-ratelimit-reset-requests: 10s") paced the key at a sixth of what it
// can serve. The window is learned from the answers instead:
//
//   - the limit is the reset window's own only once an answer left more
//     than a minute's share of it (remaining × 60 s > limit × 1 s): a
//     per-minute limit enforced in one-second slices (OpenAI's "60,000
//     requests/minute may be enforced as 1,000 requests/second") never
//     leaves more than its slice, and keeps its per-minute reading;
//   - the window is the longest reset-requests a served answer stated while
//     at most half the limit was left. For a window whose requests leave it
//     one by one (a sliding window) a served answer's reset is the window
//     itself; for a bucket that refills continuously the reset is the time
//     to refill what was used, at least half the window once half is used,
//     and it grows to the window as the key is used more (until then the
//     pace is at most twice the key's rate, and the provider's 429s hold
//     the key as before);
//   - at most a minute; no reset stated: a minute, as before;
//   - while a key's answers state a reset but the window is not known yet
//     (the limit is the window's own, and no served answer left at most
//     half of it), the key has no known rate: it is not paced by a guess
//     (read per minute, a 10 s window's limit paced the key at a sixth,
//     never using half of it, so the window was never learned), and is
//     held instead to what its provider says remains (inflight.go).
//
// The window travels with the limits to the other replicas (limits.go).

// learnWindow records what answer o says of the key's request window.
// Caller holds kp.mu. It reports whether the shared form changed.
func (k *keyState) learnWindow(o Outcome) bool {
	if o.LimitRequests <= 0 || o.RemainingRequests < 0 {
		return false
	}
	changed := false
	if !k.ownWindow && int64(o.RemainingRequests)*60 > int64(o.LimitRequests) {
		k.ownWindow, changed = true, k.learnedWindow > 0
	}
	if o.class() == classSuccess && o.ResetRequests > 0 {
		k.resetSeen = true
	}
	if o.class() == classSuccess && o.ResetRequests > 0 && 2*o.RemainingRequests <= o.LimitRequests {
		if w := min(o.ResetRequests, time.Minute); w > k.learnedWindow {
			k.learnedWindow, changed = w, changed || k.ownWindow
		}
	}
	return changed
}

// sharedWindow is the window that goes with the limits to other replicas
// (0: the limit is per minute). Caller holds kp.mu.
func (k *keyState) sharedWindow() time.Duration {
	if !k.ownWindow {
		return 0
	}
	return k.learnedWindow
}

// adoptWindow applies the window another replica learned.
func (k *keyState) adoptWindow(w time.Duration) {
	if w > 0 {
		k.ownWindow, k.learnedWindow = true, max(k.learnedWindow, min(w, time.Minute))
	}
}

// windowPending: the key's answers state a limit of their own window and
// when it resets, but the window is not known yet (no rate). Caller holds
// kp.mu.
func (k *keyState) windowPending() bool {
	return k.learnedRPM > 0 && k.ownWindow && k.learnedWindow <= 0 && k.resetSeen
}

// learnedPerMinute is the learned request limit as a per-minute rate.
func (k *keyState) learnedPerMinute() int {
	if k.windowPending() {
		return 0 // no rate known yet
	}
	if k.learnedRPM <= 0 || !k.ownWindow || k.learnedWindow <= 0 || k.learnedWindow >= time.Minute {
		return max(k.learnedRPM, 0)
	}
	return int(float64(k.learnedRPM) * float64(time.Minute) / float64(k.learnedWindow))
}

// nextSlot is how long a served answer at now that left no request in the
// key's window holds it: its reset, but at most one request's share of a
// learned window. A sliding window's reset is when its newest request
// leaves it, a refilling bucket's when it is full again, while the next
// request fits as soon as the oldest leaves or one request's share
// refills: held for the whole reset, a key paced at its window (which
// leaves it with no request to spare now and then) sat out ten seconds
// each time, and the storm's keys served two thirds of their windows. A
// request sent too early gets the provider's 429 with the exact
// Retry-After.
//
// Within the first window since this replica's first attempt on the key
// the share is wrong: the window filled before the pace knew it (the
// burst the cold start and what remains let through, learnedwindow.go),
// and its oldest requests leave only a window after the first of them.
// The key is held until then (within the reset): in the storm every
// key's first-window 429s came a share apart after the window was full,
// each only to be told to wait for the burst to leave. Not when the
// window was known at that first attempt (a replica that restarted under
// steady traffic and adopted it from the others): the pace spaced its
// attempts from the start, and no burst of its own fills the window.
// Caller holds kp.mu.
func (k *keyState) nextSlot(o Outcome, now time.Time) time.Duration {
	if o.RemainingRequests != 0 || o.class() != classSuccess || !k.ownWindow || k.learnedWindow <= 0 || k.learnedRPM <= 0 {
		return o.ResetRequests
	}
	hold := k.learnedWindow / time.Duration(k.learnedRPM)
	if first := k.firstSent.Add(k.learnedWindow); k.firstBlind && !k.firstSent.IsZero() && now.Before(first) {
		hold = max(hold, first.Sub(now))
	}
	if o.ResetRequests <= 0 {
		return hold
	}
	return min(o.ResetRequests, hold)
}
