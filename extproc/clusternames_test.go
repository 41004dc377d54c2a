package extproc

import (
	"os"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/routing"
)

// TestClusterNames: the cached names are the pools' own for every pool of
// the plan (family, native, context window, backend pin), a pool outside
// the plan and an older snapshot get theirs built, and the cache follows
// the newest snapshot only.
func TestClusterNames(t *testing.T) {
	load := func(t *testing.T) *config.Config {
		t.Helper()
		b, err := os.ReadFile("../xds/translator/testdata/pools.yaml")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse(b, "pools.yaml", config.Options{SkipSecrets: true})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cur, old := load(t), load(t)
	s := &Server{}
	s.cfg.Store(cur)
	plan := routing.Plan(cur)
	if len(plan) < 4 {
		t.Fatalf("the plan has %d pools; the test wants several kinds", len(plan))
	}
	for _, p := range plan {
		if got, want := s.clusterName(cur, p.Pool), p.Cluster(); got != want {
			t.Errorf("%+v: %q, want %q", p.Pool, got, want)
		}
	}
	outside := contract.Pool{Alias: "not-a-model", MinContext: 7}
	if got := s.clusterName(cur, outside); got != outside.Cluster() {
		t.Errorf("a pool outside the plan: %q, want %q", got, outside.Cluster())
	}
	if got := s.clusterName(old, plan[0].Pool); got != plan[0].Cluster() || s.clusters.Load().cfg != cur {
		t.Errorf("an older snapshot: %q, cache for the newest kept: %v", got, s.clusters.Load().cfg == cur)
	}
	if n := testing.AllocsPerRun(100, func() { s.clusterName(cur, plan[0].Pool) }); n != 0 {
		t.Errorf("%v allocations per cached name", n)
	}
}
