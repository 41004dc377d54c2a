package extproc_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/reserve"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/internal/subkey"
	"github.com/swarmgate/swarmgate/internal/subkey/subkeytest"
)

// A sub-key whose budget is spent, or whose minter's is, is refused at
// admission with 429 key_budget_exceeded in OpenAI's shape and 402
// billing_error in Anthropic's, as a spent tenant budget is; the sub-key
// store and the reserver share one redis-server, as in a replica. In both
// token_limits modes: with ratelimit the reservation holds money only
// (before, key budgets were neither held nor counted in that mode).
func TestKeyBudgetRefusedAtTheRouter(t *testing.T) {
	for _, tokens := range []string{"reserve", "ratelimit"} {
		t.Run(tokens, func(t *testing.T) { testKeyBudgetRefused(t, tokens) })
	}
}

func testKeyBudgetRefused(t *testing.T, tokens string) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := subkeytest.Run(t, rdb, "t:subkey:")
	cfg := testConfig(t)
	cfg.Accounting.TokenLimits = tokens
	cfg.Subkeys.Enabled = true
	for i := range cfg.Models {
		for j := range cfg.Models[i].Targets {
			cfg.Models[i].Targets[j].Price = config.Price{InputPerMTok: 1, OutputPerMTok: 2}
		}
	}
	// A request below costs about 0.00022 at most and 0.00021 served:
	// one fits each budget, a second does not.
	minter, _, err := store.Create(t.Context(), subkey.Key{Tenant: "alpha", Minter: true,
		Budget: &subkey.Budget{Amount: 0.0003, Period: "month", HardCap: true}})
	if err != nil {
		t.Fatal(err)
	}
	own, ownPlain, err := store.Create(t.Context(), subkey.Key{Tenant: "alpha", Parent: minter.ID,
		Budget: &subkey.Budget{Amount: 0.0003, Period: "run", HardCap: true}})
	if err != nil {
		t.Fatal(err)
	}
	_, siblingPlain, err := store.Create(t.Context(), subkey.Key{Tenant: "alpha", Parent: minter.ID})
	if err != nil {
		t.Fatal(err)
	}
	res := reserve.New(rdb, cfg, reserve.Options{Logger: slog.New(slog.DiscardHandler), Keys: wire.KeyBudgets(store)})
	h := newHarness(t, cfg, func(o *extproc.Options) {
		o.Authenticator = subkey.Auth{Store: store}
		o.Reserver = wire.Reserver(res, func() *config.Config { return cfg })
	})

	openai := `{"model":"chat","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`
	st, stop := h.stream(t, contract.RoleRouter)
	roundTrip(t, st, reqHeaders(false, ":method", "POST", ":path", "/v1/chat/completions", "authorization", "Bearer "+ownPlain, "content-type", "application/json"))
	if resp := roundTrip(t, st, reqBody(openai)); resp.GetRequestBody() == nil {
		t.Fatalf("first request not admitted: %v", resp)
	}
	serve(t, st, `{"prompt_tokens":10,"completion_tokens":100,"total_tokens":110}`)
	stop()
	spent := ledger.TenantKey(cfg.Redis.KeyPrefix, "alpha", "rv:key:"+own.ID+":run:spent")
	waitUntil(t, "the first request settled", func() bool { v, _ := rdb.Get(t.Context(), spent).Int64(); return v > 0 })

	for _, tc := range []struct {
		name, key, path, body, msg string
		headers                    []string
		anthropic, retry           bool
	}{
		{"own run budget/openai", ownPlain, "/v1/chat/completions", openai, "This API key has used its lifetime budget.", nil, false, false},
		{"own run budget/anthropic", ownPlain, "/v1/messages", openai, "This API key has used its lifetime budget.", []string{"anthropic-version", "2023-06-01"}, true, false},
		{"minter's budget/openai", siblingPlain, "/v1/chat/completions", openai, "parent key `" + minter.ID + "` has used its monthly budget", nil, false, true},
		{"minter's budget/anthropic", siblingPlain, "/v1/messages", openai, "parent key `" + minter.ID + "` has used its monthly budget", []string{"anthropic-version", "2023-06-01"}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, stop := h.stream(t, contract.RoleRouter)
			defer stop()
			hs := append([]string{":method", "POST", ":path", tc.path, "authorization", "Bearer " + tc.key, "content-type", "application/json"}, tc.headers...)
			if ir := roundTrip(t, st, reqHeaders(false, hs...)).GetImmediateResponse(); ir != nil {
				t.Fatalf("refused at the headers: %s", ir.GetBody())
			}
			ir := roundTrip(t, st, reqBody(tc.body)).GetImmediateResponse()
			if ir == nil {
				t.Fatal("admitted past the key's budget")
			}
			var e keyError
			if err := json.Unmarshal(ir.GetBody(), &e); err != nil || !strings.Contains(e.Error.Message, tc.msg) {
				t.Fatalf("body %s (%v), want a message with %q", ir.GetBody(), err, tc.msg)
			}
			code := ir.GetStatus().GetCode()
			if tc.anthropic {
				if code != 402 || e.Type != "error" || e.Error.Type != "billing_error" {
					t.Errorf("Anthropic shape: %d %s", code, ir.GetBody())
				}
			} else if code != 429 || e.Error.Type != "insufficient_quota" || e.Error.Code == nil || *e.Error.Code != "key_budget_exceeded" {
				t.Errorf("OpenAI shape: %d %s", code, ir.GetBody())
			}
			if _, has := setOf(t, ir.GetHeaders())["retry-after"]; has != tc.retry {
				t.Errorf("retry-after present %v, want %v (a run budget never resets)", has, tc.retry)
			}
		})
	}
}

// waitUntil polls cond until it holds or 10 s pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
