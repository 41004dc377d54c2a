package admission

import (
	"context"
	"time"
)

// Pace is a scope's admission rate.
type Pace struct {
	// Rate is requests per second; 0 admits whenever capacity is there.
	Rate float64
	// Burst is how many may be admitted back to back (at least 1).
	Burst int
	// TokenRate is tokens per second (the keys' TPM / 60); 0 does not pace
	// by tokens. A ticket costs its Tokens; the token GCRA lets one
	// request through at a time and spaces the next by its cost.
	TokenRate float64
}

// Ticket is one waiting request in the order.
type Ticket struct {
	ID     string
	Scope  string
	Tenant string
	Weight float64 // > 0
	Class  int     // 0 first
	Tokens int     // estimated tokens (prompt + completion), for TokenRate
	// Deadline is when the ticket leaves by itself (its maximum wait),
	// also if its replica dies and never removes it.
	Deadline time.Time
	// Lead lets the shared order admit the ticket from any of the first
	// Lead+1 places, not only the first (0: first only). A replica sets it
	// for its own first waiter of the scope (Options.Lead): the global
	// first may be another replica's, which asks only every poll, and a
	// pace slot waiting for it is lost. Order is then global within Lead
	// places; each replica's own waiters still go in their order.
	Lead int
}

// Decision is the order's answer for one ticket.
type Decision struct {
	Admitted bool
	// Joined: the ticket is now in the order (it must Leave when it stops
	// waiting without being admitted).
	Joined bool
	// Wait is how long until the pace lets the next ticket through (0 when
	// the ticket only waits for those ahead of it).
	Wait time.Duration
	// Ahead is how many tickets are before it.
	Ahead int64
	// Tag is the ticket's place in the order (lower first).
	Tag float64
	// Next is how many of the tickets passed to Step after an admitted
	// one were admitted too (a prefix of them).
	Next int
}

// Order is the admission order of every replica. Each call is one bounded
// decision.
type Order interface {
	// Step puts t in the order if it is not there yet and, when ready
	// (the keys have capacity now), admits it if it is first and the pace
	// allows. A ticket admitted at once, with nobody waiting, never joins.
	// When t is admitted, next (joined tickets of the same scope, in the
	// caller's order) are admitted after it in the same decision, each
	// while it is first in the order and the pace allows; the first that
	// is not ends the run. One step then drains a burst a
	// replica holds instead of one round trip per request.
	Step(ctx context.Context, t *Ticket, next []*Ticket, p Pace, ready bool) (Decision, error)
	// Leave removes t without admitting it (timed out or cancelled).
	Leave(ctx context.Context, t *Ticket) error
	// Depth is the number of tickets waiting in scope.
	Depth(ctx context.Context, scope string) (int64, error)
}

// classSpan separates classes in a tag: virtual time stays far below it
// (2^40 weighted requests per scope).
const classSpan = float64(1 << 40)

// gcraWait is the pace decision: the wait before the next admission, and
// the theoretical arrival times after admitting now (ms), for requests
// (tat) and tokens (ttat). Both must allow.
func gcraWait(tat, ttat, nowMs float64, p Pace, tokens int) (wait time.Duration, next, nextT float64) {
	next, nextT = tat, ttat
	var d float64
	if p.Rate > 0 {
		interval := 1000 / p.Rate
		t := max(tat, nowMs)
		d = t - float64(max(p.Burst, 1)-1)*interval - nowMs
		next = t + interval
	}
	if p.TokenRate > 0 {
		t := max(ttat, nowMs)
		d = max(d, t-nowMs)
		nextT = t + float64(max(tokens, 1))*1000/p.TokenRate
	}
	if d > 0 {
		return time.Duration(d * float64(time.Millisecond)), tat, ttat
	}
	return 0, next, nextT
}
