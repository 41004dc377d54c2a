package reserve

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// BenchmarkReserveSettle is one admission (tenant TPM, model TPM and budget
// scopes in one script) plus its settle, against a local redis-server.
func BenchmarkReserveSettle(b *testing.B) {
	srv := redistest.Start(b)
	cfg := testConfig(b, srv.Addr, "2s", "")
	cfg.Tenants[0].Limits.TPM = 1 << 40
	cfg.Tenants[0].ModelLimits["small"] = cfg.Tenants[0].Limits
	r := replicas(b, srv, cfg, 1, time.Minute)[0]
	ctx := context.Background()
	var resLat, setLat []time.Duration
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		start := time.Now()
		res, err := r.Reserve(ctx, Request{RequestID: fmt.Sprint("b", i), Tenant: "acme", Model: "small",
			PromptTokens: 1000, MaxOutputTokens: 200, Price: price})
		if err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if err := r.Settle(ctx, res, pricing.Usage{PromptTokens: 1000, CompletionTokens: 50}, 1); err != nil {
			b.Fatal(err)
		}
		resLat, setLat = append(resLat, mid.Sub(start)), append(setLat, time.Since(mid))
	}
	for name, d := range map[string][]time.Duration{"reserve": resLat, "settle": setLat} {
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Nanoseconds())/1e3, name+"-p50-µs")
		b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds())/1e3, name+"-p99-µs")
	}
}

// All keys of one reservation script (every scope, the key budgets' spend
// counters, the settled marker and the ledger's month hash) are in the
// tenant's slot, so it runs on Cluster.
func TestReservationKeysShareASlot(t *testing.T) {
	r := &Reserver{}
	keys := []string{ledger.MonthKey("sg:", "acme", "2026-12"), settledKey("sg:", "acme", "req-1")}
	for _, s := range []string{ScopeTenant, ScopeModel, ScopeKey, ScopeBudget} {
		z, h := r.scopeKeys("sg:", "acme", s, "gpt-4o:latest", "v1", "2026-12")
		keys = append(keys, z, h)
	}
	for _, w := range []string{"run", "2026-12-05", "2026-12"} {
		z, h, spend := keyScopeKeys("sg:", "acme", KeyHold{KeyID: "sk_0123456789abcdef", Window: w})
		keys = append(keys, z, h, spend)
	}
	for _, k := range keys {
		if redistest.Slot(k) != redistest.Slot(keys[0]) {
			t.Fatalf("%s in slot %d, %s in %d", k, redistest.Slot(k), keys[0], redistest.Slot(keys[0]))
		}
	}
}

// BenchmarkReserveNoScopes is admission for a tenant without TPM limits or
// a hard cap: no Redis round trip at all.
func BenchmarkReserveNoScopes(b *testing.B) {
	cfg := testConfig(b, "127.0.0.1:1", "2s", "")
	r := New(nil, cfg, Options{Logger: quietLog()})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := r.Reserve(ctx, Request{RequestID: "x", Tenant: "free", Model: "big", PromptTokens: 10, Price: price})
		if err != nil || len(res.Scopes) != 0 {
			b.Fatal(err)
		}
	}
}

// BenchmarkReserveBudgetLevels is one admission and its settle held
// against one budget (the tenant's) or three (a minted key's, its
// minter's and the tenant's) in the same script call.
func BenchmarkReserveBudgetLevels(b *testing.B) {
	srv := redistest.Start(b)
	cfg := testConfig(b, srv.Addr, "2s", "")
	t, _ := cfg.Tenant("tree")
	t.Budget.Monthly = 1e9
	keys := fakeKeys{
		"minter": capped(1e9, "month"),
		"c":      child("minter", capped(1e9, "day")),
	}
	for _, bc := range []struct {
		name, key string
	}{{"levels=1", "v5"}, {"levels=3", "c"}} {
		b.Run(bc.name, func(b *testing.B) {
			rdb := srv.Client()
			r := New(rdb, cfg, Options{Logger: quietLog(), Keys: keys})
			ctx := context.Background()
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			var resLat []time.Duration
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				id := fmt.Sprint(bc.name, "-", i)
				start := time.Now()
				res, err := r.Reserve(ctx, Request{RequestID: id, Tenant: "tree", Model: "big", KeyID: bc.key,
					PromptTokens: 1000, MaxOutputTokens: 200, Price: price})
				resLat = append(resLat, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Settle(ctx, res, pricing.Usage{PromptTokens: 1000, CompletionTokens: 50}, 1); err != nil {
					b.Fatal(err)
				}
			}
			slices.Sort(resLat)
			b.ReportMetric(float64(resLat[len(resLat)/2].Nanoseconds())/1e3, "reserve-p50-µs")
			// Redis's own time per script call (reserve and settle alike),
			// free of the network and the client.
			b.ReportMetric(scriptMicros(b, rdb), "redis-µs/script")
		})
	}
}

// scriptMicros is Redis's mean time per EVALSHA since the last CONFIG
// RESETSTAT, from INFO commandstats.
func scriptMicros(b *testing.B, rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
					x, _ := strconv.ParseFloat(v, 64)
					return x
				}
			}
		}
	}
	b.Fatal("no evalsha in commandstats")
	return 0
}
