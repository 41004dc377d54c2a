package budget

import (
	"errors"
	"fmt"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
)

// ErrUnavailable marks a refusal because Redis could not answer and the
// limit's failure mode is closed. The edge maps it to 503.
var ErrUnavailable = errors.New("accounting store unavailable")

// ExceededError refuses a request because a money budget cannot cover it:
// the tenant's, or with KeyID set a sub-key's (the request's own key or
// one above it). The edge maps it to an OpenAI-shaped 429 (code
// "budget_exceeded", "key_budget_exceeded" for a key's).
type ExceededError struct {
	Tenant string
	// KeyID names the key whose budget refused ("": the tenant's).
	KeyID  string
	Budget string // "monthly" for a tenant; a key's period: "run", "day", "month"
	Month  string // "2006-01"; a key's window: "run", "2006-01-02", "2006-01"
	// Spent is the ledger's month total; Held is what in-flight requests
	// have reserved; Requested is this request's worst-case cost.
	Spent, Held, Requested, Cap pricing.Money
	// RetryAfter is the time until the budget resets (the next month or
	// day) or until in-flight reservations expire, whichever frees room;
	// zero when nothing will (a key's run budget).
	RetryAfter time.Duration
}

func (e *ExceededError) Error() string {
	if e.KeyID != "" {
		return fmt.Sprintf("budget: key %q of tenant %q: %s budget (%s) exhausted: spent %s, in flight %s, request up to %s, cap %s",
			e.KeyID, e.Tenant, e.Budget, e.Month, e.Spent, e.Held, e.Requested, e.Cap)
	}
	return fmt.Sprintf("budget: tenant %q %s budget for %s exhausted: spent %s, in flight %s, request up to %s, cap %s",
		e.Tenant, e.Budget, e.Month, e.Spent, e.Held, e.Requested, e.Cap)
}

// UntilNextMonth is the time from now to the start of the next UTC month.
func UntilNextMonth(now time.Time) time.Duration {
	now = now.UTC()
	next := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	return next.Sub(now)
}
