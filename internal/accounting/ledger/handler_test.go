package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
)

func handlerConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
backends: [{name: b, base_url: "http://127.0.0.1:1/v1", keys: [{id: k1, secret: "env:NOPE"}]}]
models: [{name: m, targets: [{backend: b}]}]
tenants: [{name: acme, keys: [{id: v1, hash: "sha256:%064d"}], models: ["*"]}]
accounting: {currency: EUR}
`, 1)), "t.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestHandler(t *testing.T) {
	l, _, _ := newTestLedger(t, Options{})
	cfg := handlerConfig(t)
	e := Entry{RequestID: "sg-r1", Tenant: "acme", Model: "m", UpstreamModel: "m-up", Backend: "b", KeyID: "k1", Status: 200, Time: testTime,
		Usage: pricing.Usage{PromptTokens: 10, CompletionTokens: 5}, Cost: pricing.FromFloat(0.25)}
	if err := l.Record(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(l.Handler(func() *config.Config { return cfg }))
	defer srv.Close()
	tests := []struct {
		query string
		code  int
		body  string
	}{
		{"?tenant=acme&month=2026-12", 200, `"cost":"0.250000000"`},
		{"?tenant=acme&month=2026-11", 200, `"requests":0`},
		{"?month=2026-12", 200, `"tenants":[{"tenant":"acme","total":{"requests":1,`},
		{"", 200, `"tenants":[{"tenant":"acme"`},
		{"?month=2026-13", 400, "YYYY-MM"},
		{"?tenant=nobody", 404, "unknown tenant"},
		{"?tenant=acme&month=12-2026", 400, "YYYY-MM"},
		{"?request_id=sg-r1", 200, `"request_id":"sg-r1","tenant":"acme","model":"m","upstream_model":"m-up","backend":"b","key_id":"k1","status":200`},
		{"?request_id=sg-nope", 404, "no ledger entry"},
		{"?tenant=nobody&request_id=sg-r1", 404, "unknown tenant"},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			resp, err := http.Get(srv.URL + "/usage" + tc.query)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(resp.Body)
			if resp.StatusCode != tc.code || !strings.Contains(buf.String(), tc.body) {
				t.Fatalf("%d %s, want %d containing %s", resp.StatusCode, buf.String(), tc.code, tc.body)
			}
			if tc.code == 200 && strings.Contains(tc.query, "tenant=") {
				var rep Report
				if err := json.Unmarshal(buf.Bytes(), &rep); err != nil || rep.Currency != "EUR" {
					t.Fatalf("decode: %v, %+v", err, rep)
				}
			}
		})
	}
	rec := httptest.NewRecorder()
	l.Handler(func() *config.Config { return cfg }).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/usage?tenant=acme", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", rec.Code)
	}
}

// TestHandlerFollowsReloads: the handler answers from the config in force,
// not the one it was built with.
func TestHandlerFollowsReloads(t *testing.T) {
	l, _, _ := newTestLedger(t, Options{})
	var cur atomic.Pointer[config.Config]
	cur.Store(handlerConfig(t))
	srv := httptest.NewServer(l.Handler(cur.Load))
	defer srv.Close()
	status := func(tenant string) int {
		t.Helper()
		resp, err := http.Get(srv.URL + "/usage?tenant=" + tenant)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("late"); got != http.StatusNotFound {
		t.Fatalf("before the reload: %d, want 404", got)
	}
	reloaded, err := config.Parse([]byte(fmt.Sprintf(`
backends: [{name: b, base_url: "http://127.0.0.1:1/v1", keys: [{id: k1, secret: "env:NOPE"}]}]
models: [{name: m, targets: [{backend: b}]}]
tenants: [{name: late, keys: [{id: v2, hash: "sha256:%064d"}], models: ["*"]}]
`, 2)), "t2.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	cur.Store(reloaded)
	if got := status("late"); got != http.StatusOK {
		t.Errorf("tenant added by the reload: %d, want 200", got)
	}
	if got := status("acme"); got != http.StatusNotFound {
		t.Errorf("tenant removed by the reload: %d, want 404", got)
	}
	cur.Store(nil)
	if got := status("late"); got != http.StatusServiceUnavailable {
		t.Errorf("no config: %d, want 503", got)
	}
}

func TestPrintUsage(t *testing.T) {
	_, srv, rdb := newTestLedger(t, Options{})
	cfg := handlerConfig(t)
	cfg.Redis.Addrs = []string{srv.Addr}
	l := New(rdb, OptionsFrom(cfg))
	for i, c := range []float64{1.5, 0.0000005} {
		e := Entry{RequestID: fmt.Sprint(i), Tenant: "acme", Model: "m", Backend: "b", KeyID: fmt.Sprint("k", i), Time: testTime,
			Usage: pricing.Usage{PromptTokens: 1000, CompletionTokens: 10, CachedTokens: 100}, Cost: pricing.FromFloat(c), Partial: i == 1}
		if err := l.Record(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := PrintUsage(t.Context(), &out, FormatTable, rdb, cfg, "acme", "2026-12"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tenant acme, month 2026-12, cost in EUR", "MODEL", "k0", "1.500000", "0.000001", "TOTAL", "2000", "1.500001", "1 partial"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, out.String())
		}
	}
	if err := PrintUsage(t.Context(), &out, FormatTable, rdb, cfg, "nobody", ""); err == nil {
		t.Fatal("unknown tenant accepted")
	}
}
