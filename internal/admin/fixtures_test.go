package admin

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Distinctive secret values: none may ever appear in admin output.
var testSecrets = map[string]string{
	"T_UPSTREAM_A1": "sk-DISTINCTIVE-upstream-a1-7f3c9e",
	"T_UPSTREAM_A2": "sk-DISTINCTIVE-upstream-a2-118d0b",
	"T_UPSTREAM_B1": "opaque-DISTINCTIVE-b1-55aa",
	"T_REDIS_PASS":  "redis-DISTINCTIVE-pass-9931",
	"T_VIRTUAL_KEY": "sk-swarmgate-DISTINCTIVE-vk-4242",
}

const testConfigYAML = `
redis:
  addrs: [127.0.0.1:1]
  password: env:T_REDIS_PASS
alerts:
  webhook_url: https://hooks.example.test/services/T000/B000/DISTINCTIVEwebhooktoken
backends:
  - name: relay-a
    base_url: http://127.0.0.1:18101/v1
    headers: {openai-organization: org-visible-1}
    keys:
      - {id: relay-a-1, secret: env:T_UPSTREAM_A1, weight: 2}
      - {id: relay-a-2, secret: env:T_UPSTREAM_A2}
  - name: relay-b
    base_url: http://127.0.0.1:18102/v1
    auth: x-api-key
    keys:
      - {id: relay-b-1, secret: env:T_UPSTREAM_B1}
models:
  - name: gpt-4o-mini
    targets: [{backend: relay-a, price: {input_per_mtok: 0.15, output_per_mtok: 0.6}}, {backend: relay-b, priority: 1, price: {input_per_mtok: 0.15, output_per_mtok: 0.6}}]
admission:
  max_wait: 2s
  classes:
    - {name: planner, priority: 0}
    - {name: bulk, priority: 2}
tenants:
  - name: team-red
    keys: [{id: red-1, secret: env:T_VIRTUAL_KEY}]
    models: ["*"]
    budget: {monthly: 50, alerts: [50, 90], hard_cap: true}
  - name: team-blue
    keys: [{id: blue-1, hash: "sha256:4855f154c11c373e2fdbfaa73255b7c171d898177ebea021b0ea7fa93d7a47b6"}]
    models: ["*"]
    budget: {monthly: 20}
`

func testConfig(t testing.TB) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(testConfigYAML), "admin-test.yaml", config.Options{
		LookupEnv: func(k string) (string, bool) { v, ok := testSecrets[k]; return v, ok },
	})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// tripped is the key pool state the tests show: relay-a-2 is open.
func tripped() KeySource {
	return KeySourceFunc(func(context.Context) ([]KeyState, error) {
		return []KeyState{
			{Backend: "relay-a", KeyID: "relay-a-1", State: BreakerClosed, Weight: 2, InFlight: 3, Picks: 1200, LastStatus: 200},
			{Backend: "relay-a", KeyID: "relay-a-2", State: BreakerOpen, Weight: 1, Consecutive429: 3, Trips: 2, Picks: 640, LastStatus: 429,
				OpenUntil: time.Now().Add(30 * time.Second), Reason: "429"},
			{Backend: "relay-b", KeyID: "relay-b-1", State: BreakerHalfOpen, Weight: 1, Consecutive5xx: 5, Trips: 1, Picks: 87, LastStatus: 503, Reason: "5xx"},
		}, nil
	})
}

func budgets() BudgetSource {
	return BudgetSourceFunc(func(context.Context) ([]BudgetState, error) {
		return []BudgetState{
			{Tenant: "team-red", Period: "2026-12", Spent: 46.5, Limit: 50, Currency: "USD", HardCap: true, AlertsFired: []float64{50, 90}},
			{Tenant: "team-blue", Period: "2026-12", Spent: 4, Limit: 20, Currency: "USD"},
		}, nil
	})
}

func refusals() *RefusalLog {
	l := NewRefusalLog(10)
	now := time.Now()
	l.Add(Refusal{Time: now.Add(-40 * time.Second), Tenant: "team-red", Model: "gpt-4o-mini", Status: 429, Reason: "tenant tpm limit"})
	l.Add(Refusal{Time: now.Add(-5 * time.Second), Tenant: "team-red", Model: "gpt-4o-mini", Status: 402, Reason: "budget exhausted (hard cap)"})
	l.Add(Refusal{Time: now.Add(-time.Second), Model: `<img src=x onerror="document.body.dataset.pwned=1">`, Status: 401, Reason: "unknown virtual key"})
	return l
}

// queued is the admission queue the tests show: relay-a's keys are cooling
// down, so team-red and team-blue wait there, and team-red also waits for
// its TPM window.
func queued() QueueSource {
	return QueueSourceFunc(func(context.Context) (QueueState, error) {
		return QueueState{Waiting: 5, MaxQueue: 1024, Scopes: []QueueScope{
			{Scope: "relay-a", Depth: 4, OldestWaitSeconds: 1.25, Waiters: []QueueWaiters{
				{Tenant: "team-blue", Class: 2, ClassName: "bulk", Count: 1},
				{Tenant: "team-red", Class: 0, ClassName: "planner", Count: 1},
				{Tenant: "team-red", Class: 2, ClassName: "bulk", Count: 2},
			}},
			{Scope: "tpm:tenant:team-red", Depth: 1, OldestWaitSeconds: 0.4, Waiters: []QueueWaiters{
				{Tenant: "team-red", Class: 0, ClassName: "planner", Count: 1},
			}},
		}, Counters: QueueCounters{AdmittedAfterWait: 41, TimedOut: 3, Cancelled: 2, TooLong: 7, Full: 1}}, nil
	})
}

type testServer struct {
	URL    string
	cancel context.CancelFunc
	done   chan error
}

// startServer runs an admin server on a real loopback listener until the
// test ends, and checks it shut down cleanly.
func startServer(t *testing.T, opts Options) *testServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{URL: "http://" + lis.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	s := New(opts)
	go func() { ts.done <- s.Run(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-ts.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return ts
}

func fullOptions(t *testing.T) Options {
	cfg := testConfig(t)
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "swarmgate_admin_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(7)
	return Options{
		Gatherer: reg,
		Config:   func() *config.Config { return cfg },
		Keys:     tripped(),
		Budgets:  budgets(),
		Refusals: refusals(),
		Queue:    queued(),
		Usage: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"usage":[{"tenant":"team-red","cost":46.5}],"path":"`+r.URL.Path+`"}`)
		}),
		Ready:   []ReadyCheck{{Name: "always", Check: func(context.Context) error { return nil }, Required: true}},
		Version: "test-1",
	}
}

func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

var errDown = errors.New("connection refused")

func contains(s string, subs ...string) (missing []string) {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			missing = append(missing, x)
		}
	}
	return missing
}
