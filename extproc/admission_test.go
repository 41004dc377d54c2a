package extproc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/keypool"
)

type budgetAnswer struct {
	st  extproc.BudgetStatus
	err error
}

func (b budgetAnswer) Check(context.Context, string) (extproc.BudgetStatus, error) {
	return b.st, b.err
}

// keysAnswer wraps the real key pool but reports every backend exhausted,
// failing or only busy.
type keysAnswer struct {
	extproc.KeyPicker
	retry   time.Duration
	failing bool
}

func (k keysAnswer) Available([]string) (bool, time.Duration) { return false, k.retry }
func (k keysAnswer) Failing([]string) bool                    { return k.failing }

func TestAdmissionBudgetAndKeys(t *testing.T) {
	cfg := testConfig(t)
	cfg.Accounting.TokenLimits = "ratelimit"
	cfg.Tenants[0].Budget = &config.Budget{Monthly: 5, HardCap: true}
	cfg.FailureModes.Budget = config.FailClosed
	pools, err := keypool.New(cfg, keypool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		keys   extproc.KeyPicker
		budget extproc.BudgetChecker
		status int
		code   string
		retry  string
	}{
		{"budget spent", wire.Keys(pools), budgetAnswer{st: extproc.BudgetStatus{Exhausted: true, Limit: 5, RetryAfter: time.Hour}}, 429, "budget_exceeded", "3600"},
		{"budget store down, fail closed", wire.Keys(pools), budgetAnswer{err: errors.New("redis down")}, 503, "accounting_unavailable", "1"},
		{"every key rate limited or busy", keysAnswer{wire.Keys(pools), 2500 * time.Millisecond, false}, budgetAnswer{}, 429, "upstream_keys_exhausted", "3"},
		{"every key failing", keysAnswer{wire.Keys(pools), 2500 * time.Millisecond, true}, budgetAnswer{}, 503, "upstream_keys_exhausted", "3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := extproc.New(extproc.Options{Config: cfg, Keys: tc.keys, Usage: wire.Usage(), Budgets: tc.budget})
			if err != nil {
				t.Fatal(err)
			}
			x := srv.NewRouterExchange()
			defer x.End()
			ctx := context.Background()
			x.Handle(ctx, reqHeaders(false, chatHeaders(keyAlpha)...))
			resp := x.Handle(ctx, reqBody(`{"model":"chat","messages":[{"role":"user","content":"hi"}]}`))
			ir := resp.GetImmediateResponse()
			if int(ir.GetStatus().GetCode()) != tc.status {
				t.Fatalf("status %v body %s", ir.GetStatus(), ir.GetBody())
			}
			if set := setOf(t, ir.GetHeaders()); set["retry-after"] != tc.retry {
				t.Errorf("retry-after %q want %q", set["retry-after"], tc.retry)
			}
		})
	}
}

// SetConfig swaps the snapshot for new streams: a key added by a reload
// works, one removed stops working, without a restart.
func TestSetConfigSwapsSnapshot(t *testing.T) {
	h := newHarness(t, testConfig(t))
	try := func(key string) uint32 {
		st, cancel := h.stream(t, "router")
		defer cancel()
		resp := roundTrip(t, st, reqHeaders(true, ":method", "GET", ":path", "/v1/models", "authorization", "Bearer "+key))
		return uint32(resp.GetImmediateResponse().GetStatus().GetCode())
	}
	if try("sk-new") != 401 || try(keyAlpha) != 200 {
		t.Fatal("before reload")
	}
	y := strings.Replace(testYAML(), "  - name: beta\n", "  - name: gamma\n    models: [chat]\n    keys:\n      - {id: gamma-1, hash: "+config.HashKey("sk-new")+"}\n  - name: beta\n", 1)
	y = strings.Replace(y, "      - {id: alpha-1, hash: "+config.HashKey(keyAlpha)+"}\n", "", 1)
	env := map[string]string{"K_SMALL_1": "a", "K_BIG_1": "b", "K_BIG_2": "c"}
	next, err := config.Parse([]byte(y), "reload.yaml", config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	h.srv.SetConfig(next)
	if try("sk-new") != 200 || try(keyAlpha) != 401 {
		t.Fatal("after reload")
	}
}
