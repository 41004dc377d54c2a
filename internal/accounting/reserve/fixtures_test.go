package reserve

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// testConfig is a gateway config with tenants "acme" (tenant TPM, a model
// TPM on "small", a large hard-capped budget), "capped" (a 0.01 hard cap
// only), "tpmonly", "free" (no limits) and "tree" (a 0.05 hard cap, for
// sub-key budgets under it).
func testConfig(t testing.TB, addr, ttl, extra string) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`
redis: {addrs: [%q], read_timeout: 5s}
%s
backends:
  - name: b
    base_url: http://127.0.0.1:1/v1
    keys: [{id: k1, secret: env:NOPE}]
models:
  - name: big
    targets: [{backend: b, price: {input_per_mtok: 1, output_per_mtok: 2}}]
  - name: small
    targets: [{backend: b, price: {input_per_mtok: 1, output_per_mtok: 2}}]
tenants:
  - name: acme
    keys: [{id: v1, hash: "sha256:%064d"}]
    models: ["*"]
    limits: {tpm: 10000}
    model_limits: {small: {tpm: 3000}}
    budget: {monthly: 1000, hard_cap: true}
  - name: capped
    keys: [{id: v3, hash: "sha256:%064d"}]
    models: ["*"]
    budget: {monthly: 0.01, hard_cap: true}
  - name: tpmonly
    keys: [{id: v4, hash: "sha256:%064d"}]
    models: ["*"]
    limits: {tpm: 1000}
  - name: free
    keys: [{id: v2, hash: "sha256:%064d"}]
    models: ["*"]
  - name: tree
    keys: [{id: v5, hash: "sha256:%064d"}]
    models: ["*"]
    budget: {monthly: 0.05, hard_cap: true}
`, addr, extra, 1, 3, 4, 2, 5)
	cfg, err := config.Parse([]byte(y), "test.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	// Short TTLs make expiry testable; validation would ask for a TTL
	// above the long-job timeout.
	d, err := time.ParseDuration(ttl)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Accounting.ReservationTTL.Duration = d
	return cfg
}

var price = config.Price{InputPerMTok: 1, OutputPerMTok: 2}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// replicas returns n Reservers, each with its own Redis client, as separate
// ext_proc replicas would have.
func replicas(t testing.TB, srv *redistest.Server, cfg *config.Config, n int, window time.Duration) []*Reserver {
	t.Helper()
	out := make([]*Reserver, n)
	for i := range out {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
		t.Cleanup(func() { _ = c.Close() })
		out[i] = New(c, cfg, Options{Window: window, Logger: quietLog()})
	}
	return out
}

// held is what a scope holds now, read directly from Redis.
func held(t testing.TB, rdb *redis.Client, cfg *config.Config, tenant, name, model string) int64 {
	t.Helper()
	r := &Reserver{}
	_, h := r.scopeKeys(cfg.Redis.KeyPrefix, tenant, name, model, "", "")
	v, err := rdb.HGet(t.Context(), h, "_sum").Int64()
	if err == redis.Nil {
		return 0
	}
	if err != nil {
		t.Fatalf("held: %v", err)
	}
	return v
}
