package wire

import (
	"context"
	"errors"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/internal/accounting/budget"
	"github.com/swarmgate/swarmgate/internal/accounting/reserve"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/subkey"
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
// tenant/model TPM and the hard-capped budget reserved atomically). The
// settlement takes the entry's cost as priced once at the request's end;
// the config argument is no longer read and stays for the callers' sake.
func Reserver(r *reserve.Reserver, _ func() *config.Config) extproc.Reserver {
	return reserver{r}
}

type reserver struct{ r *reserve.Reserver }

func (a reserver) Reserve(ctx context.Context, req extproc.ReserveRequest) (extproc.Reservation, error) {
	res, err := a.r.Reserve(ctx, reserve.Request{RequestID: req.RequestID, Tenant: req.Tenant, Model: req.Model, KeyID: req.KeyID,
		PromptTokens: req.PromptTokens, MaxOutputTokens: req.MaxOutputTokens, Price: req.Price, Wait: req.Wait, Queued: req.Queued})
	var le *reserve.LimitError
	var be *budget.ExceededError
	switch {
	case err == nil:
		return extproc.Reservation{ID: res.RequestID, Granted: true, Handle: res}, nil
	case errors.As(err, &le):
		return extproc.Reservation{Scope: le.Scope, RetryAfter: le.RetryAfter, Limit: le.Limit,
			Remaining: max(le.Limit-le.Used, 0), Reset: le.RetryAfter, Behind: le.Behind, Never: le.Never()}, nil
	case errors.As(err, &be):
		return extproc.Reservation{Budget: true, RetryAfter: be.RetryAfter, BudgetKey: be.KeyID, BudgetPeriod: be.Budget}, nil
	}
	return extproc.Reservation{}, err
}

func (a reserver) Leave(ctx context.Context, req extproc.ReserveRequest) error {
	return a.r.Leave(ctx, reserve.Request{RequestID: req.RequestID, Tenant: req.Tenant, Model: req.Model, KeyID: req.KeyID})
}

func (a reserver) Settle(ctx context.Context, res extproc.Reservation, e extproc.Entry) error {
	h, _ := res.Handle.(reserve.Reservation)
	return a.r.Settle(ctx, h, e.Usage, e.Cost)
}

func (a reserver) Release(ctx context.Context, res extproc.Reservation) error {
	h, _ := res.Handle.(reserve.Reservation)
	return a.r.Release(ctx, h)
}

// KeyBudgets adapts the sub-key store's cache to what the reserver walks:
// a key's tenant, parent and budget (nil store: no key budgets).
func KeyBudgets(s *subkey.Store) reserve.Keys {
	if s == nil {
		return nil
	}
	return keyBudgets{s}
}

type keyBudgets struct{ s *subkey.Store }

func (k keyBudgets) KeyInfo(id string) (reserve.KeyInfo, bool) {
	key, ok := k.s.Cached(id)
	if !ok {
		return reserve.KeyInfo{}, false
	}
	info := reserve.KeyInfo{Tenant: key.Tenant, Parent: key.Parent}
	if b := key.Budget; b != nil {
		info.Budget, info.HasBudget = reserve.KeyBudget{Amount: b.Amount, Period: b.Period, HardCap: b.HardCap, Alerts: b.Alerts}, true
	}
	return info, true
}
