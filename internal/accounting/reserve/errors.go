package reserve

import (
	"fmt"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/budget"
)

// ErrUnavailable marks a refusal because Redis did not answer and the
// failure mode of the limit is closed (the edge answers 503).
var ErrUnavailable = budget.ErrUnavailable

// LimitError refuses a request because a token-per-minute scope cannot hold
// it. A refusal by the money budget is a *budget.ExceededError instead.
type LimitError struct {
	Scope  string // "tenant", "model" or "key"
	Tenant string
	Model  string // for the model scope
	KeyID  string // for the key scope
	// Limit is the scope's tokens per window, Used what it holds now and
	// Requested what this request needs.
	Limit, Used, Requested int64
	Window                 time.Duration
	// RetryAfter is the time until enough of the window frees for this
	// request, counting unsettled reservations until they expire, capped at
	// one Window (most in-flight requests settle sooner). Zero when the
	// request can never fit (Requested > Limit).
	RetryAfter time.Duration
	// Behind: the request would fit, but requests refused before it wait
	// for this scope's window (Request.Wait) and come first; RetryAfter is
	// when the window frees for them.
	Behind bool
}

// Never reports whether the request can never fit the scope: it needs
// more than the whole window's limit.
func (e *LimitError) Never() bool { return !e.Behind && e.Requested > e.Limit }

func (e *LimitError) Error() string {
	who := fmt.Sprintf("tenant %q", e.Tenant)
	switch e.Scope {
	case ScopeModel:
		who += fmt.Sprintf(" model %q", e.Model)
	case ScopeKey:
		who += fmt.Sprintf(" key %q", e.KeyID)
	}
	if e.Behind {
		return fmt.Sprintf("reserve: %s: requests waiting for the token window (limit %d per %s) come first; retry after %s",
			who, e.Limit, e.Window, e.RetryAfter.Round(time.Millisecond))
	}
	if e.RetryAfter == 0 {
		return fmt.Sprintf("reserve: %s: request needs %d tokens, more than the limit of %d per %s",
			who, e.Requested, e.Limit, e.Window)
	}
	return fmt.Sprintf("reserve: %s: token limit %d per %s reached (%d in use, request needs %d); retry after %s",
		who, e.Limit, e.Window, e.Used, e.Requested, e.RetryAfter.Round(time.Millisecond))
}
