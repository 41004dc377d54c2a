package budget

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// A key budget's thresholds fire once each (its alerts need not be
// ascending; 100 comes with a hard cap), on the webhook as
// key_budget_threshold. The replica forgets a day window's claims after
// the window and a run's after runMemory (memory stays bounded), and a
// late repeat is still stopped by Redis: a run's claim never expires, as
// its spend counter does not, and one set with a TTL before loses it.
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
	claim := func(keyID, window string) string {
		return ledger.TenantKey(cfg.Redis.KeyPrefix, "acme", "budget:alert:key:"+keyID+":"+window+":50")
	}
	// A run claim an older version set with a 40-day TTL.
	old := run
	old.KeyID = "sk_old"
	rs.Client().Set(ctx, claim("sk_old", "run"), "x", alertTTL)
	for range 3 {
		b.ObserveKey(ctx, day)
		b.ObserveKey(ctx, run)
		b.ObserveKey(ctx, old)
		drain()
	}
	b.forgetPast(time.Now().Add(runMemory / 2))
	if n := remembered(b); n != 3 {
		t.Fatalf("%d alerts remembered before any is due, want 3", n)
	}
	b.forgetPast(time.Now().Add(72 * time.Hour))
	if n := remembered(b); n != 0 {
		t.Fatalf("%d alerts remembered after the day's window and runMemory, want none", n)
	}
	for _, tc := range []struct {
		key string
		ttl bool
	}{{claim("sk_1", day.Window), true}, {claim("sk_2", "run"), false}, {claim("sk_old", "run"), false}} {
		if d := rs.Client().TTL(ctx, tc.key).Val(); (d > 0) != tc.ttl {
			t.Errorf("claim %s: TTL %s", tc.key, d)
		}
	}
	// Forgotten here, claimed in Redis: nothing fires again.
	b.ObserveKey(ctx, day)
	b.ObserveKey(ctx, run)
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
	if n := remembered(b); n != 2 { // claimed again after the sweep
		t.Fatalf("%d alerts remembered, want 2", n)
	}
}

// A hard cap that refused a request on spend alone (KeySpend.Refused)
// fires its 100% alert, the tenant's (KeyID "") or a key's, with the
// refused request's worst case; a budget without a hard cap fires nothing
// for it. Observe's spend-reached 100% shares the claim.
func TestRefusalFiresTheCapAlert(t *testing.T) {
	rs := redistest.Start(t)
	h, hs := newHook(t)
	cfg := testConfig(t, rs.Addr, fmt.Sprintf("alerts: {webhook_url: %q, timeout: 2s}", hs.URL))
	month := ledger.MonthOf(time.Now())
	tests := []struct {
		name string
		s    KeySpend
		want string // the alert fired, "" none
	}{
		{"tenant", KeySpend{Tenant: "acme", Window: month, Spent: pricing.FromFloat(9.5), Budget: pricing.FromFloat(10), HardCap: true,
			Refused: true, Requested: pricing.FromFloat(0.6)}, "budget_threshold//" + month + "/100/9.500000000/0.600000000"},
		{"tenant without a hard cap", KeySpend{Tenant: "soft", Window: month, Spent: pricing.FromFloat(9.5), Budget: pricing.FromFloat(10), HardCap: true,
			Refused: true, Requested: pricing.FromFloat(0.6)}, ""},
		{"run key", KeySpend{Tenant: "acme", KeyID: "sk_r", Period: "run", Window: "run", Spent: pricing.FromFloat(0.009), Budget: pricing.FromFloat(0.01),
			HardCap: true, Alerts: []float64{95}, Refused: true, Requested: pricing.FromFloat(0.003)}, "key_budget_threshold/sk_r/run/100/0.009000000/0.003000000"},
		{"soft key", KeySpend{Tenant: "acme", KeyID: "sk_s", Period: "day", Window: "2026-01-02", Spent: pricing.FromFloat(0.009), Budget: pricing.FromFloat(0.01),
			Refused: true, Requested: pricing.FromFloat(0.003)}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			h.mu.Lock()
			h.alerts = nil
			h.mu.Unlock()
			b := New(rs.Client(), cfg, Options{Logger: quietLog()})
			go b.Run(ctx)
			for range 2 {
				b.ObserveKey(ctx, tc.s)
			}
			if tc.s.KeyID == "" {
				b.Observe(ctx, tc.s.Tenant, month, pricing.FromFloat(10)) // spend reaching the cap later fires no second 100%
			}
			for b.Pending() > 0 && ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			var got []string
			for _, a := range h.alerts {
				if a.ThresholdPercent != 100 {
					continue // Observe's lower thresholds
				}
				if !a.HardCap {
					t.Errorf("alert %+v", a)
				}
				got = append(got, fmt.Sprintf("%s/%s/%s/%g/%s/%s", a.Type, a.KeyID, a.Month, a.ThresholdPercent, a.Spent, a.Requested))
			}
			want := []string{}
			if tc.want != "" {
				want = append(want, tc.want)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("100%% alerts %v, want %v", got, want)
			}
		})
	}
}

func remembered(b *Budgets) int {
	n := 0
	b.known.Range(func(any, any) bool { n++; return true })
	return n
}

func TestKeyThresholdLabel(t *testing.T) {
	for pct, want := range map[float64]string{80: "80", 80.0001: "80", 80.9999: "80", 100: "100", 0.5: "1", 99.99: "99"} {
		if got := keyThresholdLabel(pct); got != want {
			t.Errorf("keyThresholdLabel(%v) = %q, want %q", pct, got, want)
		}
	}
}
