package admit

import (
	"context"
	"errors"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

// The collaborators the steps consult, as they use them. extproc's Options
// carry the real ones (keypool, admission, accounting/*, affinity through
// extproc/wire); a test passes fakes.

// Keys is the key pool as admission sees it.
type Keys interface {
	// Available reports whether any key of the backends is usable, and if
	// none is, how soon one reopens.
	Available(backends []string) (ok bool, retryAfter time.Duration)
	// Failing reports whether every key of the backends is open because it
	// failed rather than because it is rate limited or busy.
	Failing(backends []string) bool
}

// PinnedKeys is what Keys may also offer: KeyAvailable for the one key a
// request is pinned to (the key holding its previous response), whether it
// can take the request now, if not how soon, and whether it is failing.
type PinnedKeys interface {
	KeyAvailable(backend, key string) (ok bool, retryAfter time.Duration, failing bool)
}

// Pacer is what Keys may also offer: the rate the usable keys of backends
// can take, from their configured and learned limits.
type Pacer interface {
	Pace(backends []string) Rate
}

// Queue holds a request whose only obstacle is capacity that comes back
// soon, until it can be admitted or its wait ends (package admission).
type Queue interface {
	Admit(ctx context.Context, req QueueRequest, capacity func() (ready bool, retryAfter time.Duration, pace Rate)) QueueResult
}

// Rate is what the usable keys of a backend set can take per second
// (0: not paced by that measure).
type Rate struct {
	Requests, Tokens float64
}

// QueueRequest is one request asking the queue. OnWait is called once,
// before it starts waiting (not when it is admitted at once).
type QueueRequest struct {
	Scope    string // the target backends
	Tenant   string
	Class    string
	Priority int
	Weight   float64
	MaxWait  time.Duration
	Tokens   int    // estimated prompt + completion tokens
	Session  string // the client's chain of calls (docs/admission.md)
	OnWait   func()
}

// QueueResult is the queue's answer. Reason is set when not admitted.
type QueueResult struct {
	Admitted   bool
	Reason     string
	Waited     time.Duration
	RetryAfter time.Duration
}

// Budgets tells whether a tenant's hard-capped budget is spent
// (accounting/budget).
type Budgets interface {
	Check(ctx context.Context, tenant string) (BudgetStatus, error)
}

// BudgetStatus is a tenant's month so far.
type BudgetStatus struct {
	Exhausted  bool
	Spent      float64
	Limit      float64
	Currency   string
	RetryAfter time.Duration // until the budget frees room
}

// Reserver reserves tokens (and budget money) at admission
// (accounting/reserve); settling is extproc's, at the response's end.
type Reserver interface {
	Reserve(ctx context.Context, r ReserveRequest) (Reservation, error)
	// Leave says that r, refused with a Wait, stopped waiting without a
	// reservation: newcomers are no longer held behind it.
	Leave(ctx context.Context, r ReserveRequest) error
}

// ReserveRequest asks for tokens for one request.
type ReserveRequest struct {
	RequestID       string
	Tenant          string
	KeyID           string
	Model           string
	PromptTokens    int
	MaxOutputTokens int
	// Price is the dearest price among the targets that may serve it: the
	// money hold must cover the worst case.
	Price config.Price
	// Wait is how long the request waits in the queue if a token limit
	// refuses it (0: it does not); Queued, that the queue admitted it.
	// Requests that did not wait their turn are held behind the waiters.
	Wait   time.Duration
	Queued bool
}

// Reservation is the answer. When Granted is false the request is refused
// with 429 and Retry-After: Budget set means the money budget is spent,
// else a token limit (Scope) is reached and Limit/Remaining/Reset fill the
// x-ratelimit-*-tokens headers.
type Reservation struct {
	ID      string
	Granted bool
	Budget  bool
	// BudgetKey names the sub-key whose budget refused (the request's own
	// key or one above it; "": the tenant's), BudgetPeriod its period
	// ("run", "day", "month").
	BudgetKey, BudgetPeriod string
	Scope                   string
	RetryAfter              time.Duration
	Limit                   int64
	Remaining               int64
	Reset                   time.Duration
	// Behind: the tokens would fit, but requests that wait for the
	// window came first; RetryAfter is when it frees for them.
	Behind bool
	// Never: the request needs more than the scope's whole limit; no
	// wait and no retry can let it through.
	Never bool
	// Handle is the reserver's own state, handed back to Settle/Release.
	Handle any
}

// Owners finds who created a Responses API response (package affinity).
type Owners interface {
	// Owner is who created responseID: ErrUnknownResponse when nobody is
	// recorded; another error when the store did not answer in time.
	Owner(ctx context.Context, responseID string) (ResponseOwner, error)
}

// ResponseOwner is the backend and upstream key that created a response,
// and the tenant it was created for.
type ResponseOwner struct {
	Backend, KeyID, Tenant string
}

// ErrUnknownResponse: no owner is recorded for a previous_response_id.
var ErrUnknownResponse = errors.New("unknown response id")

// Timer is the client-facing deadline of the message being answered
// (Envoy's message timer, extended on the router-level stream while a
// request waits). nil: no extension, no class header.
type Timer interface {
	// ClassHeader is the admission.class_header value the request sent.
	ClassHeader() string
	// SessionHeader is the admission.session_header value the request sent.
	SessionHeader() string
	// Extend asks for d more from now; only the first call counts.
	Extend(d time.Duration)
	// Left is how long a further wait may last within the extension
	// already asked for, keeping answer room; ok is false when none was.
	Left(answer time.Duration) (d time.Duration, ok bool)
}
