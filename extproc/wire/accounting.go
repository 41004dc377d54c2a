package wire

import (
	"context"
	"errors"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/internal/accounting/budget"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/accounting/reserve"
	"github.com/swarmgate/swarmgate/internal/config"
)

// Budgets adapts *budget.Budgets (the admission check when
// accounting.token_limits is "ratelimit"; it applies
// failure_modes.budget itself, so an error is a fail-closed refusal).
func Budgets(b *budget.Budgets) extproc.BudgetChecker { return budgets{b} }

type budgets struct{ b *budget.Budgets }

func (b budgets) Check(ctx context.Context, tenant string) (extproc.BudgetStatus, error) {
	err := b.b.Check(ctx, tenant)
	var ex *budget.ExceededError
	switch {
	case err == nil:
		return extproc.BudgetStatus{}, nil
	case errors.As(err, &ex):
		return extproc.BudgetStatus{Exhausted: true, Spent: ex.Spent.Float(), Limit: ex.Cap.Float(), RetryAfter: ex.RetryAfter}, nil
	}
	return extproc.BudgetStatus{}, err
}

// Reserver adapts *reserve.Reserver (accounting.token_limits "reserve":
// tenant/model TPM and the hard-capped budget reserved atomically).
func Reserver(r *reserve.Reserver, cfg func() *config.Config) extproc.Reserver {
	return reserver{r, cfg}
}

type reserver struct {
	r   *reserve.Reserver
	cfg func() *config.Config
}

func (a reserver) Reserve(ctx context.Context, req extproc.ReserveRequest) (extproc.Reservation, error) {
	res, err := a.r.Reserve(ctx, reserve.Request{RequestID: req.RequestID, Tenant: req.Tenant, Model: req.Model, KeyID: req.KeyID,
		PromptTokens: req.PromptTokens, MaxOutputTokens: req.MaxOutputTokens, Price: req.Price})
	var le *reserve.LimitError
	var be *budget.ExceededError
	switch {
	case err == nil:
		return extproc.Reservation{ID: res.RequestID, Granted: true, Handle: res}, nil
	case errors.As(err, &le):
		return extproc.Reservation{Scope: le.Scope, RetryAfter: le.RetryAfter, Limit: le.Limit,
			Remaining: max(le.Limit-le.Used, 0), Reset: le.RetryAfter}, nil
	case errors.As(err, &be):
		return extproc.Reservation{Budget: true, RetryAfter: be.RetryAfter}, nil
	}
	return extproc.Reservation{}, err
}

func (a reserver) Settle(ctx context.Context, res extproc.Reservation, e extproc.Entry) error {
	h, _ := res.Handle.(reserve.Reservation)
	u := usageOf(e)
	return a.r.Settle(ctx, h, u, costOf(a.cfg(), e, u))
}

func (a reserver) Release(ctx context.Context, res extproc.Reservation) error {
	h, _ := res.Handle.(reserve.Reservation)
	return a.r.Release(ctx, h)
}

func usageOf(e extproc.Entry) pricing.Usage {
	return pricing.Usage{PromptTokens: e.Usage.PromptTokens, CompletionTokens: e.Usage.CompletionTokens, TotalTokens: e.Usage.TotalTokens,
		CachedTokens: e.Usage.CachedTokens, ReasoningTokens: e.Usage.ReasoningTokens, CacheWriteTokens: e.Usage.CacheWriteTokens}
}

// costOf prices usage at the target (model alias, backend) that served it;
// without a backend (cut before any response) the dearest target.
func costOf(cfg *config.Config, e extproc.Entry, u pricing.Usage) pricing.Money {
	m, ok := cfg.Model(e.Model)
	if !ok {
		return 0
	}
	var cost pricing.Money
	for _, t := range m.Targets {
		c := pricing.RateOf(t.Price).Cost(u)
		if t.Backend == e.Backend {
			return c
		}
		cost = max(cost, c)
	}
	return cost
}
