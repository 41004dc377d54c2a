package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/admin"
	"github.com/swarmgate/swarmgate/internal/admission"
	"github.com/swarmgate/swarmgate/internal/config"
)

// budgetSource reports each budgeted tenant's spend this month from the
// ledger, for /budgets and the status page.
func budgetSource(cfg func() *config.Config, led *ledger.Ledger) admin.BudgetSource {
	return admin.BudgetSourceFunc(func(ctx context.Context) ([]admin.BudgetState, error) {
		c := cfg()
		month := ledger.MonthOf(time.Now())
		var out []admin.BudgetState
		for _, t := range c.Tenants {
			if t.Budget == nil {
				continue
			}
			spent, err := led.MonthCost(ctx, t.Name, month)
			if err != nil {
				return nil, fmt.Errorf("budget of %s: %w", t.Name, err)
			}
			out = append(out, admin.BudgetState{Tenant: t.Name, Period: month, Spent: spent.Float(),
				Limit: t.Budget.Monthly, Currency: c.Accounting.Currency, HardCap: t.Budget.HardCap})
		}
		return out, nil
	})
}

// queueSource reports this replica's admission queue for /admission and
// the status page.
func queueSource(q *admission.Queue) admin.QueueSource {
	return admin.QueueSourceFunc(func(context.Context) (admin.QueueState, error) {
		snap := q.Snapshot()
		out := admin.QueueState{Waiting: snap.Waiting, MaxQueue: snap.MaxQueue,
			Scopes: make([]admin.QueueScope, len(snap.Scopes)), Counters: admin.QueueCounters(snap.Counters)}
		for i, s := range snap.Scopes {
			ws := make([]admin.QueueWaiters, len(s.Waiters))
			for j, w := range s.Waiters {
				ws[j] = admin.QueueWaiters(w)
			}
			out.Scopes[i] = admin.QueueScope{Scope: s.Scope, Depth: s.Depth, Waiters: ws,
				OldestWaitSeconds: s.OldestWait.Seconds()}
		}
		return out, nil
	})
}
