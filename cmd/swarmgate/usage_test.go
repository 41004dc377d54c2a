package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// The bill of a run from the command line: entries of two sub-keys with
// the label run=nightly-42 are written while Redis is down (buffered), some
// reported twice, then replayed after the restart; `swarmgate usage
// --label` and `--key` read exactly one count of each from Redis.
func TestUsageByKeyAndLabel(t *testing.T) {
	srv := redistest.Start(t)
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	yaml := gatewayYAML + fmt.Sprintf(`redis: {addrs: [%q]}
accounting: {currency: EUR}
tenants:
  - {name: acme, keys: [{id: acme-1, hash: "sha256:%064d"}], models: ["*"]}
  - {name: beta, keys: [{id: beta-1, hash: "sha256:%064d"}], models: ["*"]}
`, srv.Addr, 1, 2)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	down := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	var landed atomic.Int64 // written and duplicate: Pending is 0 while the last batch is in flight
	l := ledger.New(down, ledger.Options{KeyPrefix: "sg:", AfterWrite: func(context.Context, *ledger.Entry, ledger.Result) { landed.Add(1) }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Buffer: 100, WriteTimeout: 100 * time.Millisecond, RetryInterval: 10 * time.Millisecond})
	now := time.Now().UTC()
	u := pricing.Usage{PromptTokens: 1000, CompletionTokens: 100, TotalTokens: 1100, CachedTokens: 200}
	for i := range 6 {
		tenant, key := "acme", "sk_a"
		if i%3 == 2 {
			tenant, key = "beta", "sk_b"
		}
		e := ledger.Entry{RequestID: fmt.Sprint("req-", i), Tenant: tenant, VirtualKeyID: key, Model: "gpt-4o-mini", Backend: "openai",
			Labels: map[string]string{"run": "nightly-42"}, Time: now, Usage: u, Cost: pricing.FromFloat(0.25)}
		for range 1 + i%2 { // odd ones reported twice
			if err := l.Record(t.Context(), e); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n, _ := l.Pending(); n != 9 {
		t.Fatalf("%d entries buffered, want 9 (6 and 3 reports again)", n)
	}
	srv.Restart()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go l.Run(ctx)
	for landed.Load() < 9 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d of 9 reports replayed", landed.Load())
		case <-time.After(10 * time.Millisecond):
		}
	}
	month := now.Format("2006-01")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--label", "run=nightly-42"}, []string{"label run=nightly-42, month " + month + ", cost in EUR",
			"MONTH " + month + "         6   6000    1200     600          0          6600  1.500000",
			"ALL TIME         6   6000    1200     600          0          6600  1.500000",
			"tenant acme month         4   4000", "tenant beta all time         2   2000"}},
		{[]string{"--label", "run=nightly-42", "--tenant", "beta"}, []string{"ALL TIME         2   2000"}},
		{[]string{"--key", "sk_a"}, []string{"key sk_a (tenant acme), month " + month, "ALL TIME         4   4000    800     400          0          4400  1.000000"}},
		{[]string{"--key", "sk_b", "--month", "2000-01"}, []string{"MONTH 2000-01", "ALL TIME         2   2000"}},
		{[]string{"--tenant", "acme"}, []string{"tenant acme, month " + month, "TOTAL"}},
		// --json: the report as /usage answers it.
		{[]string{"--label", "run=nightly-42", "--json"}, []string{`"label": { "name": "run", "value": "nightly-42" }`,
			`"all_time": { "requests": 6, "input_tokens": 6000, "output_tokens": 600, "total_tokens": 6600, "cached_tokens": 1200`}},
		{[]string{"--key", "sk_a", "--json"}, []string{`"key": "sk_a"`, `"tenant": "acme"`}},
		{[]string{"--tenant", "acme", "--json"}, []string{`"tenant": "acme"`, `"total": {`}},
	} {
		r := execute(t, "", append([]string{"usage", "--config", cfgPath}, tc.args...)...)
		if r.code != exitOK {
			t.Fatalf("%v: exit %d\n%s", tc.args, r.code, r.stderr)
		}
		// Columns are aligned by width: compare with single spaces.
		out := strings.Join(strings.Fields(r.stdout), " ")
		for _, w := range tc.want {
			if !strings.Contains(out, strings.Join(strings.Fields(w), " ")) {
				t.Errorf("%v: no %q in\n%s", tc.args, w, r.stdout)
			}
		}
	}
	r := execute(t, "", "usage", "--config", cfgPath, "--key", "sk_nope")
	if r.code != exitError || !strings.Contains(r.stderr, "no usage recorded for this key") {
		t.Errorf("unknown key: exit %d\n%s", r.code, r.stderr)
	}
}
