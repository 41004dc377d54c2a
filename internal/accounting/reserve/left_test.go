package reserve

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// A counter Left cannot read is an error, not nothing used: the first
// command of the pipeline (key c's spend) is absent, so the pipeline's own
// error is redis.Nil and once hid a later command's failure.
func TestLeftReportsAFailedRead(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "1m", "")
	now := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	keys := fakeKeys{"minter": capped(0.03, "month"), "c": child("minter", capped(0.01, "run"))}
	r := New(srv.Client(), cfg, Options{Logger: quietLog(), Keys: keys, Now: func() time.Time { return now }})
	prefix := cfg.Redis.KeyPrefix
	_, minterHold, minterSpend := keyScopeKeys(prefix, "tree", KeyHold{KeyID: "minter", Window: windowOf("month", now)})
	_, _, ownSpend := keyScopeKeys(prefix, "tree", KeyHold{KeyID: "c", Window: windowOf("run", now)})
	month := ledger.MonthKey(prefix, "tree", ledger.MonthOf(now))
	rdb := srv.Client()
	for _, tc := range []struct {
		name    string
		corrupt func(context.Context) error
		want    string // in the error; "" for none
	}{
		{"nothing spent", func(context.Context) error { return nil }, ""},
		{"the minter's spend is not a string", func(ctx context.Context) error {
			return rdb.HSet(ctx, minterSpend, "x", 1).Err()
		}, "WRONGTYPE"},
		{"the minter's holds are not a hash", func(ctx context.Context) error {
			return rdb.Set(ctx, minterHold, 1, 0).Err()
		}, "WRONGTYPE"},
		{"the tenant's month is not a hash", func(ctx context.Context) error {
			return rdb.Set(ctx, month, 1, 0).Err()
		}, "WRONGTYPE"},
		{"the minter's spend is not a number", func(ctx context.Context) error {
			return rdb.Set(ctx, minterSpend, "lots", 0).Err()
		}, "invalid syntax"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if err := tc.corrupt(ctx); err != nil {
				t.Fatal(err)
			}
			if n, err := rdb.Exists(ctx, ownSpend).Result(); err != nil || n != 0 {
				t.Fatalf("the first command's key exists (%d, %v): the test proves nothing", n, err)
			}
			left, ok, err := r.Left(ctx, "tree", "c")
			switch {
			case tc.want == "" && (err != nil || !ok || left != pricing.FromFloat(0.01)):
				t.Fatalf("Left = %s %v %v, want 0.01 true", left, ok, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Left = %s %v %v, want an error with %q", left, ok, err, tc.want)
			}
		})
	}
}
