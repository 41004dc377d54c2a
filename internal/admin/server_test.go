package admin

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

func TestEndpoints(t *testing.T) {
	ts := startServer(t, fullOptions(t))
	cases := []struct {
		path        string
		status      int
		contentType string
		contains    []string
	}{
		{"/healthz", 200, "text/plain", []string{"ok"}},
		{"/readyz", 200, "application/json", []string{`"status": "ready"`, `"version": "test-1"`, `"name": "config"`, `"name": "always"`}},
		{"/config_dump", 200, "application/yaml", []string{"relay-a-1", "env:T_UPSTREAM_A1", "env:T_REDIS_PASS", "team-red"}},
		{"/keys", 200, "application/json", []string{`"backend": "relay-a"`, `"key_id": "relay-a-2"`, `"state": "open"`, `"open": 1`, `"state": "half-open"`}},
		{"/budgets", 200, "application/json", []string{`"tenant": "team-red"`, `"percent": 93`, `"hard_cap": true`}},
		{"/refusals", 200, "application/json", []string{`"total": 3`, `"reason": "budget exhausted (hard cap)"`}},
		{"/usage", 200, "application/json", []string{`"tenant":"team-red"`, `"path":"/usage"`}},
		{"/usage/team-red", 200, "application/json", []string{`"path":"/usage/team-red"`}},
		{"/metrics", 200, "text/plain", []string{"swarmgate_admin_test_total 7"}},
		{"/", 200, "text/html", []string{"<title>swarmgate status</title>", "/static/status.js"}},
		{"/status", 200, "text/html", []string{"<title>swarmgate status</title>"}},
		{"/static/status.js", 200, "javascript", []string{"POLL_MS"}},
		{"/static/status.css", 200, "text/css", []string{".state"}},
		{"/nope", 404, "", nil},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			status, h, body := get(t, ts.URL+c.path)
			if status != c.status {
				t.Fatalf("status %d, want %d: %s", status, c.status, body)
			}
			if !strings.Contains(h.Get("Content-Type"), c.contentType) {
				t.Errorf("content-type %q, want %q", h.Get("Content-Type"), c.contentType)
			}
			if m := contains(body, c.contains...); len(m) > 0 {
				t.Errorf("body lacks %q:\n%s", m, body)
			}
			if h.Get("X-Content-Type-Options") != "nosniff" {
				t.Error("no nosniff header")
			}
		})
	}
}

func TestKeysGroupedInConfigOrder(t *testing.T) {
	ts := startServer(t, fullOptions(t))
	_, _, body := get(t, ts.URL+"/keys")
	var resp keysResponse
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Pools) != 2 || resp.Pools[0].Backend != "relay-a" || resp.Pools[1].Backend != "relay-b" {
		t.Fatalf("pools: %+v", resp.Pools)
	}
	if p := resp.Pools[0]; p.Total != 2 || p.Open != 1 || p.Keys[1].State != BreakerOpen || p.Keys[1].OpenUntil.IsZero() {
		t.Errorf("relay-a: %+v", p)
	}
}

func TestNotWired(t *testing.T) {
	cfg := testConfig(t)
	ts := startServer(t, Options{Config: func() *config.Config { return cfg }})
	for _, p := range []string{"/keys", "/budgets", "/refusals", "/usage", "/metrics"} {
		status, _, body := get(t, ts.URL+p)
		if status != http.StatusServiceUnavailable || !strings.Contains(body, "not available") {
			t.Errorf("%s: %d %s", p, status, body)
		}
	}
	if status, _, _ := get(t, ts.URL+"/readyz"); status != http.StatusOK {
		t.Errorf("/readyz with only a config: %d", status)
	}
}

func TestSourceErrors(t *testing.T) {
	opts := fullOptions(t)
	opts.Keys = KeySourceFunc(func(context.Context) ([]KeyState, error) { return nil, errDown })
	opts.Budgets = BudgetSourceFunc(func(context.Context) ([]BudgetState, error) { return nil, errDown })
	ts := startServer(t, opts)
	for _, p := range []string{"/keys", "/budgets"} {
		status, _, body := get(t, ts.URL+p)
		if status != http.StatusServiceUnavailable || !strings.Contains(body, "connection refused") {
			t.Errorf("%s: %d %s", p, status, body)
		}
	}
}

func TestConfigDumpHasNoSecret(t *testing.T) {
	ts := startServer(t, fullOptions(t))
	status, _, body := get(t, ts.URL+"/config_dump")
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	for name, v := range testSecrets {
		if strings.Contains(body, v) {
			t.Errorf("value of %s in /config_dump", name)
		}
	}
	for _, leak := range []string{"DISTINCTIVEwebhooktoken", config.HashKey(testSecrets["T_VIRTUAL_KEY"])} {
		if strings.Contains(body, leak) {
			t.Errorf("%q in /config_dump", leak)
		}
	}
	// The references are there, so the dump is still useful.
	if m := contains(body, "env:T_UPSTREAM_A1", "env:T_UPSTREAM_B1", "env:T_VIRTUAL_KEY", "hooks.example.test"); len(m) > 0 {
		t.Errorf("dump lacks %q", m)
	}
	// Nothing else served by admin leaks them either.
	for _, p := range []string{"/keys", "/readyz", "/budgets", "/refusals", "/admission", "/metrics"} {
		_, _, b := get(t, ts.URL+p)
		for name, v := range testSecrets {
			if strings.Contains(b, v) {
				t.Errorf("value of %s in %s", name, p)
			}
		}
	}
}

func TestReadyz(t *testing.T) {
	ok := func(context.Context) error { return nil }
	fail := func(context.Context) error { return errDown }
	hang := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	cfg := testConfig(t)
	cases := []struct {
		name     string
		config   *config.Config
		checks   []ReadyCheck
		code     int
		status   string
		contains []string
	}{
		{"all good", cfg, []ReadyCheck{{Name: "redis", Check: ok, Required: true}}, 200, "ready", nil},
		{"optional down", cfg, []ReadyCheck{{Name: "redis", Check: fail, Why: "every Redis use is fail-open"}}, 200, "degraded",
			[]string{"redis: connection refused (every Redis use is fail-open); not required, serving on"}},
		{"required down", cfg, []ReadyCheck{{Name: "redis", Check: fail, Required: true, Why: "required: failure_modes.budget=closed"}}, 503, "unready",
			[]string{"redis: connection refused (required: failure_modes.budget=closed)"}},
		{"required hangs", cfg, []ReadyCheck{{Name: "slow", Check: hang, Required: true}}, 503, "unready", []string{"slow: check timed out"}},
		{"nil check", cfg, []ReadyCheck{{Name: "broken", Required: true}}, 503, "unready", []string{"broken: no check function"}},
		{"panicking check", cfg, []ReadyCheck{{Name: "p", Required: true, Check: func(context.Context) error { panic("boom") }}}, 503, "unready", []string{"p: check panicked: boom"}},
		{"no config", nil, nil, 503, "unready", []string{"config: no valid config loaded"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := startServer(t, Options{Config: func() *config.Config { return c.config }, Ready: c.checks, CheckTimeout: 200 * time.Millisecond})
			code, _, body := get(t, ts.URL+"/readyz")
			var resp readyResponse
			if err := json.Unmarshal([]byte(body), &resp); err != nil {
				t.Fatal(err)
			}
			if code != c.code || resp.Status != c.status {
				t.Errorf("got %d %s, want %d %s: %s", code, resp.Status, c.code, c.status, body)
			}
			reasons := strings.Join(resp.Reasons, "\n")
			if m := contains(reasons, c.contains...); len(m) > 0 {
				t.Errorf("reasons lack %q: %s", m, reasons)
			}
		})
	}
}

func TestRunGracefulShutdown(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	opts := fullOptions(t)
	opts.Usage = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "finished")
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(opts).Run(ctx, lis) }()

	var wg sync.WaitGroup
	var body string
	wg.Go(func() { _, _, body = get(t, url+"/usage") })
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("request never reached the handler")
	}
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned %v with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	wg.Wait()
	if body != "finished" {
		t.Errorf("in-flight request got %q", body)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if c, err := net.DialTimeout("tcp", lis.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("listener still accepting after shutdown")
	}
}

func TestRunListenerError(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	if err := New(Options{}).Run(context.Background(), lis); err == nil {
		t.Fatal("Run on a closed listener returned nil")
	}
}
