package admit

import (
	"context"
	"net/http"
	"strconv"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Budget is the budget step: a billed request of a tenant whose
// hard-capped monthly budget is spent is refused until the month ends.
// With reservations the money hold covers the hard cap atomically (Reserve
// does it), so the month's spend is checked only without them.
func (a *Admitter) Budget(ctx context.Context, cfg *config.Config, f *Facts) *Refusal {
	tn := f.Owner.Tenant
	if a.reserving(cfg, f) || !f.Spec.Billed || tn.Budget == nil || !tn.Budget.HardCap || a.Budgets == nil {
		return nil
	}
	bs, err := a.Budgets.Check(ctx, tn.Name)
	switch {
	case err != nil:
		a.failed("budget")
		a.log().Warn("budget check failed", "tenant", tn.Name, "err", err, "policy", cfg.FailureModes.Budget)
		if cfg.FailureModes.Budget == config.FailClosed {
			return Unavailable("budget")
		}
	case bs.Exhausted:
		return (&Refusal{Status: http.StatusTooManyRequests, Type: "insufficient_quota", Code: "budget_exceeded",
			Message: "Tenant `" + tn.Name + "` has used its monthly budget of " + strconv.FormatFloat(bs.Limit, 'f', 2, 64) + " " +
				cfg.Accounting.Currency + "."}).withRetryAfter(bs.RetryAfter)
	}
	return nil
}
