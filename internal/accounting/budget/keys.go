package budget

import (
	"context"
	"strconv"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
)

// KeySpend is a sub-key budget's spend after a settle that counted
// toward it (accounting/reserve keeps the counter), or, with Refused, a
// hard cap's refusal on spend alone.
type KeySpend struct {
	// KeyID "" is the tenant's monthly budget (Refused only: the ledger
	// reports its spend through AfterWrite); Window is then the month.
	Tenant, KeyID string
	// Period is "run", "day" or "month"; Window its instance ("run",
	// "2006-01-02", "2006-01").
	Period, Window string
	Spent, Budget  pricing.Money
	HardCap        bool
	Alerts         []float64
	// Refused: the hard cap refused a request whose worst case
	// (Requested) fits the budget but not beside Spent, in-flight holds
	// aside. The budget is used up for such a request, so its 100% alert
	// fires: admission keeps spend + holds + worst case within the cap,
	// and spend alone would seldom reach it.
	Refused   bool
	Requested pricing.Money
}

// ObserveKey queues a claim for every threshold of a key budget its spend
// has reached that this replica has not seen claimed; each fires once per
// key, window and threshold across replicas, as a tenant's does. A
// refusal (Refused) counts as reaching 100% of a hard cap, the tenant's
// too. It never blocks.
func (b *Budgets) ObserveKey(_ context.Context, s KeySpend) {
	if s.KeyID == "" {
		if s.Refused {
			b.refused(s)
		}
		return
	}
	if s.Budget <= 0 {
		return
	}
	cfg := b.cfg.Load()
	for _, pct := range thresholds(&config.Budget{Alerts: s.Alerts, HardCap: s.HardCap}) {
		capped := s.Refused && s.HardCap && pct == 100
		if s.Spent < pricing.FromFloat(s.Budget.Float()*pct/100) && !capped {
			continue // a key's alerts need not be ascending
		}
		a := Alert{Type: "key_budget_threshold", Tenant: s.Tenant, KeyID: s.KeyID, Period: s.Period, Month: s.Window,
			ThresholdPercent: pct, Spent: s.Spent, Budget: s.Budget, Currency: cfg.Accounting.Currency,
			HardCap: s.HardCap && pct >= 100, forget: windowEnd(s.Period, b.opts.Now())}
		if capped {
			a.Requested = s.Requested
		}
		b.enqueue(a)
	}
}

// refused fires the 100% alert of a tenant's hard cap that refused a
// request on spend alone (KeySpend.Refused). It shares Observe's claim, so
// the alert fires once per month whichever comes first.
func (b *Budgets) refused(s KeySpend) {
	cfg := b.cfg.Load()
	t, ok := cfg.Tenant(s.Tenant)
	if !ok || t.Budget == nil || !t.Budget.HardCap {
		return
	}
	b.enqueue(Alert{Type: "budget_threshold", Tenant: s.Tenant, Month: s.Window, ThresholdPercent: 100,
		Spent: s.Spent, Requested: s.Requested, Budget: pricing.FromFloat(t.Budget.Monthly), Currency: cfg.Accounting.Currency,
		HardCap: true, forget: windowEnd("month", b.opts.Now())})
}

// alertKey is the Redis key that claims an alert across replicas.
func (a *Alert) claimKey() string {
	pct := strconv.FormatFloat(a.ThresholdPercent, 'f', -1, 64)
	if a.KeyID != "" {
		return "budget:alert:key:" + a.KeyID + ":" + a.Month + ":" + pct
	}
	return "budget:alert:" + a.Month + ":" + pct
}

// run reports whether a is a run budget's alert, whose window never ends.
func (a *Alert) run() bool { return a.KeyID != "" && a.Period == "run" }

// runMemory is how long a replica remembers a run budget's claimed alert.
// A run never ends; kept for good, every key that ever passed a threshold
// would stay in memory.
const runMemory = 24 * time.Hour

// windowEnd is when a replica may forget an alert of the period's current
// window: a day after the window ends (until then a settle may still
// report into it), runMemory from now for a run, which never ends.
func windowEnd(period string, now time.Time) time.Time {
	now = now.UTC()
	switch period {
	case "day":
		return time.Date(now.Year(), now.Month(), now.Day()+2, 0, 0, 0, 0, time.UTC)
	case "month":
		return time.Date(now.Year(), now.Month()+1, 2, 0, 0, 0, 0, time.UTC)
	}
	return now.Add(runMemory)
}
