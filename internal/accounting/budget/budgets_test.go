package budget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testConfig(t *testing.T, addr, extra string) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`
redis: {addrs: [%q]}
%s
backends:
  - name: b
    base_url: http://127.0.0.1:1/v1
    keys: [{id: k1, secret: env:NOPE}]
models:
  - name: m
    targets: [{backend: b, price: {input_per_mtok: 1, output_per_mtok: 2}}]
tenants:
  - name: acme
    keys: [{id: v1, hash: "sha256:%064d"}]
    models: ["*"]
    budget: {monthly: 10, hard_cap: true}
  - name: soft
    keys: [{id: v2, hash: "sha256:%064d"}]
    models: ["*"]
    budget: {monthly: 10, alerts: [80]}
`, addr, extra, 1, 2)
	cfg, err := config.Parse([]byte(y), "test.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

type hook struct {
	mu     sync.Mutex
	alerts []Alert
	fail   atomic.Int64 // answer 500 to this many posts first
	posts  atomic.Int64
	got    chan struct{}
}

func newHook(t *testing.T) (*hook, *httptest.Server) {
	h := &hook{got: make(chan struct{}, 100)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.posts.Add(1)
		if h.fail.Add(-1) >= 0 {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		var a Alert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		h.mu.Lock()
		h.alerts = append(h.alerts, a)
		h.mu.Unlock()
		h.got <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	return h, srv
}

// Three replicas, each with its own ledger and Budgets, write 400 entries of
// 0.03 concurrently (12 > the 10 budget): each threshold (50, 75, 90 and the
// hard cap's 100) fires exactly once across the replicas, with one webhook
// post each.
func TestThresholdsFireOnceAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	h, hs := newHook(t)
	cfg := testConfig(t, rs.Addr, fmt.Sprintf("alerts: {webhook_url: %q, timeout: 2s}", hs.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var (
		budgets []*Budgets
		ledgers []*ledger.Ledger
		wg      sync.WaitGroup
	)
	for range 3 {
		c := redis.NewClient(&redis.Options{Addr: rs.Addr})
		t.Cleanup(func() { _ = c.Close() })
		b := New(c, cfg, Options{Logger: quietLog(), RetryBackoff: 10 * time.Millisecond})
		go b.Run(ctx)
		opts := ledger.OptionsFrom(cfg)
		opts.Logger, opts.AfterWrite = quietLog(), b.AfterWrite
		budgets = append(budgets, b)
		ledgers = append(ledgers, ledger.New(c, opts))
	}
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 400 / 12 {
				e := ledger.Entry{RequestID: fmt.Sprintf("w%d-%d", w, i), Tenant: "acme", Model: "m", Cost: pricing.FromFloat(0.03)}
				if err := ledgers[w%3].Record(ctx, e); err != nil {
					t.Errorf("record: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	for range 4 {
		select {
		case <-h.got:
		case <-ctx.Done():
			t.Fatalf("only %d alerts delivered", len(h.alerts))
		}
	}
	// Give a wrongly duplicated alert the chance to show up: all claims
	// were queued during the writes; drain them by waiting for the queues.
	for _, b := range budgets {
		for len(b.queue) > 0 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
	select {
	case <-h.got:
		t.Fatal("a threshold fired twice")
	case <-time.After(100 * time.Millisecond):
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[float64]bool{}
	for _, a := range h.alerts {
		if seen[a.ThresholdPercent] {
			t.Fatalf("threshold %g fired twice", a.ThresholdPercent)
		}
		seen[a.ThresholdPercent] = true
		if a.Tenant != "acme" || a.Budget != pricing.FromFloat(10) || a.Spent < pricing.FromFloat(10*a.ThresholdPercent/100) || a.Currency != "USD" {
			t.Fatalf("alert %+v", a)
		}
		if a.HardCap != (a.ThresholdPercent == 100) {
			t.Fatalf("hard_cap flag on %+v", a)
		}
	}
	for _, p := range []float64{50, 75, 90, 100} {
		if !seen[p] {
			t.Fatalf("threshold %g never fired; got %+v", p, h.alerts)
		}
	}
	var fired float64
	for _, b := range budgets {
		for _, p := range []string{"50", "75", "90", "100"} {
			fired += counter(b.m.alerts.WithLabelValues("acme", p))
		}
	}
	if fired != 4 {
		t.Fatalf("alert metric total %g across replicas, want 4", fired)
	}
	// The hard cap now stops new requests.
	var ee *ExceededError
	if err := budgets[0].Check(ctx, "acme"); !errors.As(err, &ee) || ee.Spent < ee.Cap || ee.Cap != pricing.FromFloat(10) {
		t.Fatalf("Check = %v, want ExceededError", err)
	}
}

func TestWebhookRetriesAndNeverBlocks(t *testing.T) {
	rs := redistest.Start(t)
	h, hs := newHook(t)
	cfg := testConfig(t, rs.Addr, fmt.Sprintf("alerts: {webhook_url: %q, timeout: 1s}", hs.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Two failures, then success: delivered on the third attempt.
	h.fail.Store(2)
	b := New(rs.Client(), cfg, Options{Logger: quietLog(), RetryBackoff: 5 * time.Millisecond})
	go b.Run(ctx)
	b.Observe(ctx, "soft", ledger.MonthOf(time.Now()), pricing.FromFloat(8))
	select {
	case <-h.got:
	case <-ctx.Done():
		t.Fatal("alert not delivered")
	}
	if n := h.posts.Load(); n != 3 {
		t.Fatalf("%d posts, want 3", n)
	}

	// A webhook that always fails: counted once, and Observe (the data
	// path) never waits for it.
	h.fail.Store(1 << 30)
	b2 := New(rs.Client(), cfg, Options{Logger: quietLog(), RetryBackoff: 5 * time.Millisecond})
	go b2.Run(ctx)
	start := time.Now()
	for i := range 1000 {
		b2.Observe(ctx, "acme", ledger.MonthOf(time.Now()), pricing.FromFloat(float64(i)/50))
	}
	if el := time.Since(start); el > 100*time.Millisecond {
		t.Fatalf("1000 Observe calls took %s", el)
	}
	for counter(b2.m.webhookErrors) < 4 {
		select {
		case <-ctx.Done():
			t.Fatalf("webhook failures counted: %g, want 4", counter(b2.m.webhookErrors))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestCheck(t *testing.T) {
	rs := redistest.Start(t)
	ctx := t.Context()
	month := ledger.MonthOf(time.Now())
	tests := []struct {
		name    string
		modes   string
		tenant  string
		spent   float64
		down    bool
		wantErr string // "", "exceeded", "unavailable"
	}{
		{"below cap", "", "acme", 9.99, false, ""},
		{"at cap", "", "acme", 10, false, "exceeded"},
		{"soft budget never refuses", "", "soft", 50, false, ""},
		{"unknown tenant", "", "nobody", 0, false, ""},
		{"redis down fail open", "failure_modes: {budget: open}", "acme", 0, true, ""},
		{"redis down fail closed", "failure_modes: {budget: closed}", "acme", 0, true, "unavailable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, rs.Addr, tc.modes)
			c := rs.Client()
			c.Del(ctx, ledger.MonthKey(cfg.Redis.KeyPrefix, tc.tenant, month))
			if tc.spent > 0 {
				c.HSet(ctx, ledger.MonthKey(cfg.Redis.KeyPrefix, tc.tenant, month), ledger.TotalCostField, int64(pricing.FromFloat(tc.spent)))
			}
			if tc.down {
				c = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
			}
			err := New(c, cfg, Options{Logger: quietLog()}).Check(ctx, tc.tenant)
			var ee *ExceededError
			switch tc.wantErr {
			case "":
				if err != nil {
					t.Fatalf("Check = %v", err)
				}
			case "exceeded":
				if !errors.As(err, &ee) || ee.Tenant != tc.tenant || ee.Spent != pricing.FromFloat(tc.spent) || ee.RetryAfter <= 0 {
					t.Fatalf("Check = %v, want ExceededError", err)
				}
			case "unavailable":
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("Check = %v, want ErrUnavailable", err)
				}
			}
		})
	}
}

// counter reads a counter's value.
func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
