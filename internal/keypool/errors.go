package keypool

import (
	"errors"
	"fmt"
	"time"
)

// ErrNoKey means no key can serve the attempt. Every pick failure matches
// it with errors.Is; an *ExhaustedError also says when to try again.
var ErrNoKey = errors.New("keypool: no usable key")

// ExhaustedError is returned when a backend has keys but none is usable now.
type ExhaustedError struct {
	Backend    string
	RetryAfter time.Duration // soonest a key could serve again (≥ 1s when unknown)
	// Failing: every key is open because it failed (5xx, resets, refused
	// credentials), not because it is rate limited or busy.
	Failing bool
	// held: some key is only held by its cold start (attempts in flight
	// before its first answer), which an answer ends (inflight.go).
	held bool
	// rest: how soon the first key resting until its provider's window
	// resets (ReasonQuota) serves again; 0 when none rests.
	rest time.Duration
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("keypool: every key of backend %s is open, busy or rate limited; retry after %s", e.Backend, e.RetryAfter)
}

// waitable is how long a pick that has waited paced of its bound may wait
// before it picks again; 0: refuse now. The request was admitted for these
// keys (the queue saw them ready) and another admitted at the same instant
// took what was left, so a pick whose keys come back within the bound
// waits for them instead of answering upstream_keys_exhausted, which the
// client sees as a 429:
//   - a key held only by its cold start: its first answer frees it;
//   - every usable key resting until its provider's window resets: the
//     soonest.
func (e *ExhaustedError) waitable(paced, bound time.Duration) time.Duration {
	switch {
	case e.held && paced+inFlightWait <= bound:
		return inFlightWait
	case e.rest > 0 && !e.Failing && paced+e.rest+time.Millisecond <= bound:
		return e.rest + time.Millisecond
	}
	return 0
}

// Is makes errors.Is(err, ErrNoKey) true.
func (e *ExhaustedError) Is(target error) bool { return target == ErrNoKey }
