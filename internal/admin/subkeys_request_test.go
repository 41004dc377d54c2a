package admin

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/subkey"
)

// A ttl must be positive and within maxTTL however it is written; a huge
// negative number of seconds once overflowed into a positive Duration and
// passed.
func TestCreateTTLBounds(t *testing.T) {
	e := startKeyAPI(t, nil)
	for _, tc := range []struct {
		name, ttl string // ttl is the JSON value
		status    int
		within    time.Duration // for a created key: its expiry is about now+within
	}{
		{"seconds as a string", `"60"`, http.StatusCreated, time.Minute},
		{"seconds as a number", `60`, http.StatusCreated, time.Minute},
		{"duration", `"90m"`, http.StatusCreated, 90 * time.Minute},
		{"zero string", `"0"`, http.StatusBadRequest, 0},
		{"zero number", `0`, http.StatusBadRequest, 0},
		{"negative string", `"-1"`, http.StatusBadRequest, 0},
		{"negative number", `-1`, http.StatusBadRequest, 0},
		{"overflowing negative string", `"-9223372037"`, http.StatusBadRequest, 0},
		{"overflowing negative number", `-9223372037`, http.StatusBadRequest, 0},
		{"min int64 string", `"-9223372036854775808"`, http.StatusBadRequest, 0},
		{"huge negative number", `-1e300`, http.StatusBadRequest, 0},
		{"negative duration", `"-5m"`, http.StatusBadRequest, 0},
		{"above the maximum string", `"3155760001"`, http.StatusBadRequest, 0},
		{"above the maximum number", `1e300`, http.StatusBadRequest, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			a := e.do(t, http.MethodPost, "/v1/keys", testAdminToken, `{"tenant":"team-red","ttl":`+tc.ttl+`}`)
			if a.status != tc.status {
				t.Fatalf("ttl %s: %d %s, want %d", tc.ttl, a.status, a.raw, tc.status)
			}
			if tc.status != http.StatusCreated {
				if a.field() != "ttl" || a.message() == "" {
					t.Fatalf("ttl %s: field %q message %q, want field ttl: %s", tc.ttl, a.field(), a.message(), a.raw)
				}
				return
			}
			exp, err := time.Parse(time.RFC3339, str(a.key()["expires_at"]))
			if err != nil {
				t.Fatalf("expires_at: %v: %s", err, a.raw)
			}
			if lo, hi := start.Add(tc.within).Add(-time.Second), time.Now().Add(tc.within).Add(time.Second); exp.Before(lo) || exp.After(hi) {
				t.Fatalf("expires_at %v, want about now+%v", exp, tc.within)
			}
		})
	}
}

// A budget amount too large for pricing.Money is a 400 on create and on
// update, also under the largest tenant budget the config allows (1e9).
func TestKeyBudgetAmountBounded(t *testing.T) {
	yaml := strings.Replace(keyConfigYAML, "budget: {monthly: 50,", "budget: {monthly: 1e9,", 1)
	cfg, err := config.Parse([]byte(yaml), "admin-keys-test.yaml", config.Options{
		LookupEnv: func(k string) (string, bool) { v, ok := testSecrets[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	if tn, ok := cfg.Tenant("team-red"); !ok || tn.Budget == nil || tn.Budget.Monthly != 1e9 {
		t.Fatal("the test config's team-red budget was not raised: the test proves nothing")
	}
	e := startKeyAPI(t, func(o *Options) { o.Config = func() *config.Config { return cfg } })
	_, mp := mustCreate(t, e.store, subkey.Key{Tenant: "team-red", Minter: true})
	id, _ := e.create(t, testAdminToken, map[string]any{"tenant": "team-red", "budget": map[string]any{"amount": 5, "period": "day"}})
	for _, tc := range []struct {
		name, method, path, token, amount string
		status                            int
	}{
		{"create at the maximum", "POST", "/v1/keys", testAdminToken, "1e9", http.StatusCreated},
		{"create 1e10", "POST", "/v1/keys", testAdminToken, "1e10", http.StatusBadRequest},
		{"create just above the maximum", "POST", "/v1/keys", testAdminToken, "1000000000.5", http.StatusBadRequest},
		{"minter creates 1e10", "POST", "/v1/keys", mp, "1e10", http.StatusBadRequest},
		{"update to 1e10", "PATCH", "/v1/keys/" + id, testAdminToken, "1e10", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"budget":{"amount":` + tc.amount + `,"period":"month","hard_cap":true}}`
			if tc.method == "POST" && tc.token == testAdminToken {
				body = `{"tenant":"team-red",` + body[1:]
			}
			a := e.do(t, tc.method, tc.path, tc.token, body)
			if a.status != tc.status {
				t.Fatalf("%d %s, want %d", a.status, a.raw, tc.status)
			}
			if tc.status == http.StatusBadRequest && (a.field() != "budget.amount" || !strings.Contains(a.message(), "maximum")) {
				t.Fatalf("field %q message %q, want budget.amount above the maximum", a.field(), a.message())
			}
		})
	}
	if k, err := e.store.Get(t.Context(), id); err != nil || k.Budget == nil || k.Budget.Amount != 5 {
		t.Fatalf("a refused update changed the budget: %+v %v", k, err)
	}
}
