package budget

import (
	"context"
	"strconv"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
)

// KeySpend is a sub-key budget's spend after a settle that counted
// toward it (accounting/reserve keeps the counter).
type KeySpend struct {
	Tenant, KeyID string
	// Period is "run", "day" or "month"; Window its instance ("run",
	// "2006-01-02", "2006-01").
	Period, Window string
	Spent, Budget  pricing.Money
	HardCap        bool
	Alerts         []float64
}

// ObserveKey queues a claim for every threshold of a key budget its spend
// has reached that this replica has not seen claimed; each fires once per
// key, window and threshold across replicas, as a tenant's does. It never
// blocks.
func (b *Budgets) ObserveKey(_ context.Context, s KeySpend) {
	if s.Budget <= 0 {
		return
	}
	cfg := b.cfg.Load()
	for _, pct := range thresholds(&config.Budget{Alerts: s.Alerts, HardCap: s.HardCap}) {
		if s.Spent < pricing.FromFloat(s.Budget.Float()*pct/100) {
			continue // a key's alerts need not be ascending
		}
		a := Alert{Type: "key_budget_threshold", Tenant: s.Tenant, KeyID: s.KeyID, Period: s.Period, Month: s.Window,
			ThresholdPercent: pct, Spent: s.Spent, Budget: s.Budget, Currency: cfg.Accounting.Currency,
			HardCap: s.HardCap && pct >= 100, forget: windowEnd(s.Period, b.opts.Now())}
		b.enqueue(a)
	}
}

// alertKey is the Redis key that claims an alert across replicas.
func (a *Alert) claimKey() string {
	pct := strconv.FormatFloat(a.ThresholdPercent, 'f', -1, 64)
	if a.KeyID != "" {
		return "budget:alert:key:" + a.KeyID + ":" + a.Month + ":" + pct
	}
	return "budget:alert:" + a.Month + ":" + pct
}

// windowEnd is a day after the end of the period's current window: until
// then a settle may still report into it. Zero for a run, which never ends.
func windowEnd(period string, now time.Time) time.Time {
	now = now.UTC()
	switch period {
	case "day":
		return time.Date(now.Year(), now.Month(), now.Day()+2, 0, 0, 0, 0, time.UTC)
	case "month":
		return time.Date(now.Year(), now.Month()+1, 2, 0, 0, 0, 0, time.UTC)
	}
	return time.Time{}
}
