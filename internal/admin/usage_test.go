package admin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/porttest"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// newUsageLedger is a ledger on its own redis-server.
func newUsageLedger(t testing.TB) *ledger.Ledger {
	t.Helper()
	srv := redistest.Start(t)
	return ledger.New(srv.Client(), ledger.Options{KeyPrefix: "sg:", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// The bill per run through the admin listener: sub-keys minted by the key
// API with a run label, their requests in the ledger (one reported twice),
// then /usage by key, by label and the rankings, over a real socket.
func TestUsageByKeyAndLabelThroughAdmin(t *testing.T) {
	l := newUsageLedger(t)
	env := startKeyAPI(t, func(o *Options) { o.Usage = l.Handler(o.Config) })
	red, _ := env.create(t, testAdminToken, map[string]any{"tenant": "team-red", "labels": map[string]string{"run": "nightly-42", "team": "red"}})
	blue, _ := env.create(t, testAdminToken, map[string]any{"tenant": "team-blue", "labels": map[string]string{"run": "nightly-42"}})
	other, _ := env.create(t, testAdminToken, map[string]any{"tenant": "team-red", "labels": map[string]string{"run": "nightly-43"}})
	month := ledger.MonthOf(time.Now())
	u := pricing.Usage{PromptTokens: 1000, CompletionTokens: 200, TotalTokens: 1200, CachedTokens: 100}
	for i, k := range []struct {
		tenant, id string
		labels     map[string]string
		cost       float64
	}{
		{"team-red", red, map[string]string{"run": "nightly-42", "team": "red"}, 0.5},
		{"team-red", red, map[string]string{"run": "nightly-42", "team": "red"}, 0.5},
		{"team-blue", blue, map[string]string{"run": "nightly-42"}, 0.25},
		{"team-red", other, map[string]string{"run": "nightly-43"}, 3},
	} {
		e := ledger.Entry{RequestID: fmt.Sprint("sg-", i), Tenant: k.tenant, VirtualKeyID: k.id, Labels: k.labels, Model: "gpt-4o",
			Backend: "relay-a", KeyID: "relay-a-1", Usage: u, Cost: pricing.FromFloat(k.cost)}
		for range 2 { // every report arrives twice: counted once
			if err := l.Record(t.Context(), e); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		path string
		code int
		want map[string]string // JSON path -> value
	}{
		{"/usage?key=" + red, 200, map[string]string{"tenant": "team-red", "month": month, "total.requests": "2", "total.total_tokens": "2400",
			"total.cached_tokens": "200", "total.cost": "1.000000000", "all_time.requests": "2", "currency": "USD"}},
		{"/usage?key=" + blue + "&tenant=team-blue", 200, map[string]string{"total.cost": "0.250000000"}},
		{"/usage?key=" + blue + "&tenant=team-red", 404, map[string]string{"error.message": "no usage recorded for this key (not a config key, and no request billed to it within the retention)"}},
		{"/usage?label=run=nightly-42", 200, map[string]string{"label.value": "nightly-42", "total.requests": "3", "total.cost": "1.250000000",
			"all_time.input_tokens": "3000", "tenants.0.tenant": "team-red", "tenants.1.tenant": "team-blue", "tenants.1.total.requests": "1"}},
		{"/usage?label=run=nightly-42&tenant=team-blue", 200, map[string]string{"total.requests": "1", "tenants.0.tenant": "team-blue"}},
		{"/usage?label=team=red", 200, map[string]string{"total.requests": "2"}},
		{"/usage?top=keys", 200, map[string]string{"by": "keys", "top.0.key": other, "top.0.total.cost": "3.000000000", "top.1.key": red, "top.2.key": blue}},
		{"/usage?top=label:run&limit=1", 200, map[string]string{"top.0.label.value": "nightly-43", "top.0.tenant": "team-red", "top.1.tenant": "<absent>"}},
		{"/usage?label=nightly-42", 400, map[string]string{"error.message": "label must be name=value (name 1 to 64 bytes, value up to 128)"}},
		{"/usage?top=run", 400, map[string]string{"error.message": "top must be keys or label:NAME (label:run for the runs)"}},
		{"/usage?key=" + red + "&label=run=nightly-42", 400, map[string]string{"error.message": "give one of request_id, key, label and top"}},
	} {
		a := env.do(t, http.MethodGet, tc.path, testAdminToken, nil)
		if a.status != tc.code {
			t.Fatalf("%s: %d %s, want %d", tc.path, a.status, a.raw, tc.code)
		}
		for path, want := range tc.want {
			if got := jsonAt(a.body, path); got != want {
				t.Errorf("%s: %s = %s, want %s\n%s", tc.path, path, got, want, a.raw)
			}
		}
	}
	if a := env.do(t, http.MethodGet, "/usage?key="+red, "", nil); a.status != http.StatusUnauthorized {
		t.Errorf("without the admin token: %d %s", a.status, a.raw)
	}
}

// jsonAt reads a dotted path (numbers index arrays) as text; "<absent>"
// when there is nothing there.
func jsonAt(v any, path string) string {
	for _, part := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[part]
		case []any:
			var i int
			if _, err := fmt.Sscan(part, &i); err != nil || i >= len(x) {
				return "<absent>"
			}
			v = x[i]
		default:
			return "<absent>"
		}
	}
	if v == nil {
		return "<absent>"
	}
	return fmt.Sprint(v)
}

// The status page shows the keys and the runs spending most this month
// (from the ledger's rankings, in real headless Chromium) and puts the
// budgets closest to their cap first.
func TestStatusPageTopKeysAndRuns(t *testing.T) {
	l := newUsageLedger(t)
	opts := fullOptions(t)
	opts.Usage = l.Handler(opts.Config)
	opts.Budgets = BudgetSourceFunc(func(context.Context) ([]BudgetState, error) {
		return []BudgetState{ // the one nearest its cap last
			{Tenant: "team-blue", Period: "2026-12", Spent: 4, Limit: 20, Currency: "USD"},
			{Tenant: "team-red", Period: "2026-12", Spent: 46.5, Limit: 50, Currency: "USD", HardCap: true},
		}, nil
	})
	for i, k := range []struct {
		tenant, id, run string
		cost            float64
	}{
		{"team-red", "sk_red_a", "nightly-42", 1.5},
		{"team-blue", "sk_blue_b", "nightly-42", 0.25},
		{"team-red", "sk_red_c", "<img src=x data-pwned>", 7},
	} {
		e := ledger.Entry{RequestID: fmt.Sprint("sg-", i), Tenant: k.tenant, VirtualKeyID: k.id, Labels: map[string]string{"run": k.run},
			Model: "gpt-4o-mini", Usage: pricing.Usage{PromptTokens: 100, CompletionTokens: 10}, Cost: pricing.FromFloat(k.cost)}
		if err := l.Record(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
	url := serveWithKeyList(t, New(opts).Handler(), `{"keys":[
		{"id":"sk_red_a","tenant":"team-red","budget":{"amount":2,"period":"run","hard_cap":true}},
		{"id":"sk_blue_b","tenant":"team-blue","budget":{"amount":10,"period":"month"}},
		{"id":"sk_gone","tenant":"team-red","revoked":true,"budget":{"amount":1,"period":"day"}},
		{"id":"sk_red_c","tenant":"team-red"}]}`)
	dom := string(runChromium(t, url+"/status", "--dump-dom"))
	if !strings.Contains(dom, `data-loaded="true"`) {
		t.Fatalf("page never finished its first poll:\n%s", dom)
	}
	keys := element(t, dom, "tbody", `id="top-keys"`)
	if m := contains(keys, `data-top="team-red/sk_red_c"`, "7.0000 USD", `data-top="team-red/sk_red_a"`, "1.5000 USD", `data-top="team-blue/sk_blue_b"`, ">110<"); len(m) > 0 {
		t.Errorf("top keys lack %q: %s", m, keys)
	}
	if strings.Index(keys, "sk_red_c") > strings.Index(keys, "sk_red_a") {
		t.Errorf("top keys not by cost: %s", keys)
	}
	runs := element(t, dom, "tbody", `id="top-runs"`)
	if m := contains(runs, `data-top="team-red/nightly-42"`, `data-top="team-blue/nightly-42"`, "&lt;img src=x data-pwned&gt;"); len(m) > 0 {
		t.Errorf("top runs lack %q: %s", m, runs)
	}
	if strings.Contains(dom, "<img src=x") {
		t.Error("a run label was rendered as HTML")
	}
	budgets := element(t, dom, "section", `id="budgets-section"`)
	if red, blue := strings.Index(budgets, `data-tenant="team-red"`), strings.Index(budgets, `data-tenant="team-blue"`); red < 0 || blue < red {
		t.Errorf("the budget closest to its cap is not first: %s", budgets)
	}
	if m := contains(budgets, `data-near="true"`, "near cap"); len(m) > 0 {
		t.Errorf("budgets lack %q: %s", m, budgets)
	}
	// Sub-keys' stored budgets beside their spend from the ledger: sk_red_a
	// spent 1.5 of its run budget of 2; revoked keys and keys without a
	// budget are not shown.
	if m := contains(budgets, `data-budget-key="sk_red_a" data-percent="75.0" data-near="true"`, "team-red / sk_red_a (run)", "1.50 / 2.00 USD (75.0%) hard cap",
		`data-budget-key="sk_blue_b" data-percent="2.5"`, "team-blue / sk_blue_b (month)"); len(m) > 0 {
		t.Errorf("sub-key budgets lack %q: %s", m, budgets)
	}
	if strings.Contains(budgets, "sk_gone") || strings.Contains(budgets, `data-budget-key="sk_red_c"`) {
		t.Errorf("a revoked or unbudgeted key is shown: %s", budgets)
	}
	if strings.Index(budgets, "sk_red_a") > strings.Index(budgets, `data-tenant="team-blue"`) {
		t.Errorf("the sub-key at 75%% is not before the tenant at 20%%: %s", budgets)
	}
	if dir := os.Getenv("SWARMGATE_SCREENSHOT_DIR"); dir != "" {
		runChromium(t, url+"/status", "--screenshot="+filepath.Join(dir, "status-usage.png"), "--window-size=1280,1400")
	}
}

// serveWithKeyList serves h on a porttest port, with GET /v1/keys
// answering list (a key API as the admin token would see it: the page sends
// no token here, so the real one would refuse).
func serveWithKeyList(t *testing.T, h http.Handler, list string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/keys", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, list)
	})
	mux.Handle("/", h)
	lis, err := net.Listen("tcp", porttest.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + lis.Addr().String()
}
