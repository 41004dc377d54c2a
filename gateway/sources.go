package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/swarmgate/swarmgate/accounting/ledger"
	"github.com/swarmgate/swarmgate/admin"
	"github.com/swarmgate/swarmgate/config"
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
