package keypool

import "time"

// In flight against what remains.
//
// With admission.pace on, a key is paced at its known rate (keypace.go).
// Until that rate is known (no answer yet, or a window still being
// learned, learnedwindow.go) nothing spaces its picks, and a swarm's first
// calls all reached it at once: the storm of issue 27 sent 500 first calls
// to a planner key of 60 per 10 s, most of them answered 429. So, with the
// pace on:
//
//   - until its first answer, a key has at most coldStartInFlight attempts
//     in flight on a replica (the first answer states its limit), for at
//     most coldStartMax after its first attempt: a provider that sends no
//     headers that soon (a long non-streamed completion, a held stream)
//     would otherwise keep the key at two calls at once for as long, with
//     nothing learned;
//   - after it, at most a replica's share of what its provider last said
//     remains (x-ratelimit-remaining-requests, rounded up, until its
//     reset): the attempts in flight are not yet counted in what it
//     states. The share is 1/N for the N replicas that pick keys (counted
//     in Redis, replicas.go), at most a half: unknown (no Redis) or fewer,
//     half leaves another picker of the same provider key its part; while
//     the key's window is pending (learnedwindow.go), half of that share.
//
// A key held so is not usable now: the admission queue waits for an answer
// (inFlightWait) instead of sending what would be refused.

// coldStartInFlight bounds a key's attempts in flight on a replica until
// its first answer.
const coldStartInFlight = 2

// coldStartMax bounds the cold start: after it, a key whose first attempt
// has had no answer is no longer held by it.
const coldStartMax = time.Second

// inFlightWait is when a key held to what remains is looked at again: an
// answer comes back within an upstream's first bytes.
const inFlightWait = 50 * time.Millisecond

// noteRemaining records what answer o says remains of the key's requests.
// Caller holds kp.mu.
func (k *keyState) noteRemaining(o Outcome, now time.Time) {
	k.answered = true
	if o.RemainingRequests < 0 {
		return
	}
	// A refusal states what remains too (what another replica used since
	// this one's last answer); it holds until its Retry-After.
	until := resetOr(o.ResetRequests, time.Second)
	if o.class() != classSuccess && o.RetryAfter > 0 {
		until = o.RetryAfter
	}
	k.reqLeft, k.reqLeftUntil = o.RemainingRequests, now.Add(until)
}

// overRemaining reports whether another attempt would pass what the key
// may have in flight now on one of replicas pickers (at least 2). Caller
// holds kp.mu.
func (k *keyState) overRemaining(now time.Time, replicas int) bool {
	switch {
	case !k.answered:
		return k.inFlight >= coldStartInFlight && (k.firstSent.IsZero() || now.Sub(k.firstSent) < coldStartMax)
	case k.reqLeftUntil.IsZero() || !now.Before(k.reqLeftUntil):
		return false
	}
	if k.windowPending() {
		// No pace yet: every replica's burst lands on what this answer
		// stated, and the 429s of a window overrun are retried on the
		// other keys in the same burst. A quarter until the window is
		// known (measured in the storm: the first window's 429s).
		return k.inFlight >= ceilDiv(k.reqLeft, 2*replicas)
	}
	return k.inFlight >= ceilDiv(k.reqLeft, replicas)
}

// drainedBy reports whether the key is held now only because its
// provider said no request remains (or, honoured by the breaker, opened it
// for quota) until a moment no later than t (t zero: never). Such a key has
// room at t: a pick may book that slot (soonestPacedLocked) rather than
// refuse the request. Caller holds kp.mu.
func (k *keyState) drainedBy(t time.Time) bool {
	at := k.roomAt()
	return !t.IsZero() && !at.IsZero() && !at.After(t)
}

// roomAt is when the key's provider said its window has room again after
// it said none remains; zero when it did not say so. Caller holds kp.mu.
func (k *keyState) roomAt() time.Time {
	var at time.Time
	if k.answered && k.reqLeft <= 0 && !k.reqLeftUntil.IsZero() {
		at = k.reqLeftUntil
	}
	if k.br.open && k.br.reason == ReasonQuota && k.br.until.After(at) {
		at = k.br.until
	}
	return at
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
