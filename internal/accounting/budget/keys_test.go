package budget

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// A key budget's thresholds fire once each (its alerts need not be
// ascending; 100 comes with a hard cap), on the webhook as
// key_budget_threshold. A day window's claims are forgotten by the replica
// after the window, and a late repeat is still stopped by Redis; a run's
// are kept.
func TestKeyAlerts(t *testing.T) {
	rs := redistest.Start(t)
	h, hs := newHook(t)
	cfg := testConfig(t, rs.Addr, fmt.Sprintf("alerts: {webhook_url: %q, timeout: 2s}", hs.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := New(rs.Client(), cfg, Options{Logger: quietLog()})
	go b.Run(ctx)
	drain := func() {
		t.Helper()
		for b.Pending() > 0 {
			select {
			case <-ctx.Done():
				t.Fatal("alerts not delivered")
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	day := KeySpend{Tenant: "acme", KeyID: "sk_1", Period: "day", Window: time.Now().UTC().Format(time.DateOnly),
		Budget: pricing.FromFloat(2), Spent: pricing.FromFloat(1.2), Alerts: []float64{90, 50}, HardCap: true}
	run := KeySpend{Tenant: "acme", KeyID: "sk_2", Period: "run", Window: "run",
		Budget: pricing.FromFloat(1), Spent: pricing.FromFloat(1), Alerts: []float64{50}}
	for range 3 {
		b.ObserveKey(ctx, day)
		b.ObserveKey(ctx, run)
		drain()
	}
	b.forgetPast(time.Now().Add(72 * time.Hour))
	if n := remembered(b); n != 1 {
		t.Fatalf("%d alerts remembered after the day's window, want the run's only", n)
	}
	b.ObserveKey(ctx, day) // forgotten here, claimed in Redis
	drain()
	h.mu.Lock()
	defer h.mu.Unlock()
	got := map[string]int{}
	for _, a := range h.alerts {
		if a.Type != "key_budget_threshold" || a.Tenant != "acme" || a.Currency != "USD" {
			t.Errorf("alert %+v", a)
		}
		got[fmt.Sprintf("%s/%s/%s/%g/%v", a.KeyID, a.Period, a.Month, a.ThresholdPercent, a.HardCap)]++
	}
	want := map[string]int{"sk_1/day/" + day.Window + "/50/false": 1, "sk_2/run/run/50/false": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("alerts %v, want %v", got, want)
	}
	if n := remembered(b); n != 2 { // the run's, and the day's claimed again after the sweep
		t.Fatalf("%d alerts remembered, want 2", n)
	}
}

func remembered(b *Budgets) int {
	n := 0
	b.known.Range(func(any, any) bool { n++; return true })
	return n
}
