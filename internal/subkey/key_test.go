package subkey

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
)

// A budget amount must fit pricing.Money with room: 1e10 once wrapped to a
// negative Money, and a hard-capped key then refused every request.
func TestValidateBudgetAmountBounds(t *testing.T) {
	if m := pricing.FromFloat(MaxBudgetAmount); m <= 0 || m.Float() != MaxBudgetAmount || m > math.MaxInt64/2 {
		t.Fatalf("MaxBudgetAmount converts to %v: not exact and positive with room", m)
	}
	now := time.Now()
	for _, tc := range []struct {
		name    string
		monthly float64 // the tenant's budget; 0: none
		amount  float64
		ok      bool
	}{
		{"the maximum", 0, MaxBudgetAmount, true},
		{"a cent", 0, 0.01, true},
		{"just above the maximum", 0, MaxBudgetAmount + 1, false},
		{"1e10", 0, 1e10, false},
		{"1e10 under the config's largest tenant budget", 1e12, 1e10, false},
		{"max float", 0, math.MaxFloat64, false},
		{"infinite", 0, math.Inf(1), false},
		{"not a number", 0, math.NaN(), false},
		{"zero", 0, 0, false},
		{"negative", 0, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tn, ok := cfg.Tenant("demo")
			if !ok {
				t.Fatal("no tenant demo in the default config")
			}
			if tn.Budget == nil {
				t.Fatal("tenant demo of the default config has no budget")
			}
			b := *tn.Budget
			b.Monthly = tc.monthly
			tn.Budget = &b
			if tc.monthly == 0 {
				tn.Budget = nil
			}
			k := Key{Tenant: "demo", Budget: &Budget{Amount: tc.amount, Period: "month", HardCap: true}}
			err := Validate(cfg, &k, nil, now)
			var fe *FieldError
			switch {
			case tc.ok && err != nil:
				t.Fatalf("amount %v refused: %v", tc.amount, err)
			case !tc.ok && (!errors.As(err, &fe) || fe.Field != "budget.amount" || fe.Reason == ""):
				t.Fatalf("amount %v: err %v, want a budget.amount error", tc.amount, err)
			case tc.ok && pricing.FromFloat(tc.amount) <= 0:
				t.Fatalf("accepted amount %v converts to %v", tc.amount, pricing.FromFloat(tc.amount))
			}
		})
	}
}
