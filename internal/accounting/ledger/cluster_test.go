package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/budget"
	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/accounting/reserve"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// startCluster runs a 3-master Redis Cluster of real redis-server processes
// (internal/redistest starts standalone servers only) and returns a
// ClusterClient. Cluster refuses a script whose keys span slots
// (CROSSSLOT), so this checks the hash tags for real.
func startCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Cluster(t, 3)})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// The ledger, the reservation scripts and the alert claims all run on a
// real 3-node Redis Cluster; tenants land on different nodes.
func TestOnRedisCluster(t *testing.T) {
	cc := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
redis: {mode: cluster, addrs: ["127.0.0.1:1"], read_timeout: 5s}
backends: [{name: b, base_url: "http://127.0.0.1:1/v1", keys: [{id: k1, secret: "env:NOPE"}]}]
models: [{name: m, targets: [{backend: b, price: {input_per_mtok: 1, output_per_mtok: 2}}]}]
tenants:
  - {name: acme, keys: [{id: v1, hash: "sha256:%064d"}], models: ["*"], limits: {tpm: 1000}, model_limits: {m: {tpm: 900}}, budget: {monthly: 1, hard_cap: true}}
  - {name: beta, keys: [{id: v2, hash: "sha256:%064d"}], models: ["*"], limits: {tpm: 1000}, budget: {monthly: 1}}
  - {name: gamma, keys: [{id: v3, hash: "sha256:%064d"}], models: ["*"], limits: {tpm: 1000}}
`, 1, 2, 3)), "cluster.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	bud := budget.New(cc, cfg, budget.Options{Logger: log})
	go bud.Run(ctx)
	lopts := ledger.OptionsFrom(cfg)
	lopts.Logger, lopts.AfterWrite = log, bud.AfterWrite
	l := ledger.New(cc, lopts)
	r := reserve.New(cc, cfg, reserve.Options{Logger: log})

	nodesUsed := map[string]bool{}
	for _, tenant := range []string{"acme", "beta", "gamma"} {
		res, err := r.Reserve(ctx, reserve.Request{RequestID: tenant + "-1", Tenant: tenant, Model: "m",
			PromptTokens: 100, MaxOutputTokens: 100, Price: cfg.Models[0].Targets[0].Price})
		if err != nil || res.Degraded {
			t.Fatalf("%s reserve: %v (degraded %v)", tenant, err, res.Degraded)
		}
		if _, err := r.Reserve(ctx, reserve.Request{RequestID: tenant + "-2", Tenant: tenant, Model: "m", PromptTokens: 900}); err == nil {
			t.Fatalf("%s: over-limit request admitted", tenant)
		}
		u := pricing.Usage{PromptTokens: 100, CompletionTokens: 50}
		cost := pricing.RateOf(cfg.Models[0].Targets[0].Price).Cost(u)
		for range 2 { // a duplicated report
			if err := l.Record(ctx, ledger.Entry{RequestID: tenant + "-1", Tenant: tenant, Model: "m", Backend: "b", KeyID: "k1", Usage: u, Cost: cost,
				VirtualKeyID: "sk_" + tenant, Labels: map[string]string{"run": "r1", "team": tenant}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Settle(ctx, res, u, cost); err != nil {
			t.Fatalf("%s settle: %v", tenant, err)
		}
		rep, err := l.Query(ctx, tenant, ledger.MonthOf(time.Now()))
		if err != nil || rep.Total.Requests != 1 || rep.Total.Cost != cost {
			t.Fatalf("%s report %+v, %v", tenant, rep.Total, err)
		}
		if k, err := l.QueryKey(ctx, tenant, "sk_"+tenant, rep.Month); err != nil || k.AllTime.Requests != 1 || k.Total.Cost != cost {
			t.Fatalf("%s key report %+v, %v", tenant, k, err)
		}
		if top, err := l.TopLabels(ctx, []string{tenant}, rep.Month, "run", 5); err != nil || len(top) != 1 || top[0].Total.Cost != cost {
			t.Fatalf("%s runs %+v, %v", tenant, top, err)
		}
		if n, _ := l.Pending(); n != 0 {
			t.Fatalf("%s: %d ledger entries buffered (a cluster error?)", tenant, n)
		}
		slot := cc.ClusterKeySlot(ctx, ledger.MonthKey(cfg.Redis.KeyPrefix, tenant, rep.Month)).Val()
		slots, _ := cc.ClusterSlots(ctx).Result()
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) {
				nodesUsed[s.Nodes[0].Addr] = true
			}
		}
	}
	if len(nodesUsed) < 2 {
		t.Logf("all tenants hashed to one node (%v); keys still verified per slot", nodesUsed)
	}
	// A run over the three tenants (three nodes, likely) in one query.
	run, err := l.QueryLabel(ctx, []string{"acme", "beta", "gamma"}, ledger.Label{Name: "run", Value: "r1"}, ledger.MonthOf(time.Now()))
	if err != nil || run.Total.Requests != 3 || len(run.Tenants) != 3 {
		t.Fatalf("run over the cluster: %+v, %v", run, err)
	}
	// The hard cap refuses on the cluster too.
	big := reserve.Request{RequestID: "acme-big", Tenant: "acme", Model: "m", PromptTokens: 1, MaxOutputTokens: 1, Price: config.Price{InputPerMTok: 1e6, OutputPerMTok: 1e6}}
	var be *budget.ExceededError
	if _, err := r.Reserve(ctx, big); !errors.As(err, &be) {
		t.Fatalf("hard cap on cluster: %v", err)
	}
}
