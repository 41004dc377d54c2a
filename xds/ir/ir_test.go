package ir

import (
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

const yaml = `
request: {timeout: 100s, long_timeout: 500s}
backends:
  - {name: a, base_url: "https://a.example/v1", max_connections: 10, max_pending_requests: 20, max_requests: 30, keys: [{id: a1, secret: env:A}]}
  - {name: b, base_url: "http://10.0.0.2:8000/v1", max_connections: 5, max_pending_requests: 6, max_requests: 7, connect_timeout: 9s, keys: [{id: b1, secret: env:B}]}
  - {name: c, base_url: "http://10.0.0.3/v1", keys: [{id: c1, secret: env:C}]}
models:
  - name: m
    timeout: 30s
    targets:
      - {backend: a, priority: 0, weight: 2, context_window: 8000}
      - {backend: b, priority: 5, model: other, context_window: 128000}
      - {backend: c, priority: 5, weight: 1}
  - name: long
    long_running: true
    targets: [{backend: c}]
`

func TestBuild(t *testing.T) {
	cfg, err := config.Parse([]byte(yaml), "t.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	g := Build(cfg)
	names := []string{}
	for _, p := range g.Pools {
		names = append(names, p.Cluster)
	}
	// poolctx128001_m: above every known window, only the target of
	// unknown window (c); the router sends a longer request there.
	want := []string{"pool_long", "pool_m", "poolctx128000_m", "poolctx128001_m"}
	if len(names) != len(want) {
		t.Fatalf("pools %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("pools %v, want %v", names, want)
		}
	}
	long, m, ctx, above := g.Pools[0], g.Pools[1], g.Pools[2], g.Pools[3]

	tests := []struct {
		name      string
		got, want any
	}{
		{"model timeout overrides request.timeout", m.Timeout, 30 * time.Second},
		{"long timeout", m.LongTimeout, 500 * time.Second},
		{"long_running model: both routes long", long.Timeout, 500 * time.Second},
		{"priorities made dense (0,5 -> 0,1)", [3]uint32{m.Targets[0].Priority, m.Targets[1].Priority, m.Targets[2].Priority}, [3]uint32{0, 1, 1}},
		{"targets sorted by priority then backend", [3]string{m.Targets[0].Backend, m.Targets[1].Backend, m.Targets[2].Backend}, [3]string{"a", "b", "c"}},
		{"max_connections summed", m.MaxConnections, uint32(10 + 5 + 1024)},
		{"max_requests summed", m.MaxRequests, uint32(30 + 7 + 4096)},
		{"per-host connections: largest backend", m.MaxConnectionsPerHost, uint32(1024)},
		{"connect timeout: the largest", m.ConnectTimeout, 9 * time.Second},
		{"TLS and SNI from base_url", [2]any{m.Targets[0].TLS, m.Targets[0].ServerName}, [2]any{true, "a.example"}},
		{"port default 80 for http", m.Targets[2].Port, uint32(80)},
		{"context cluster drops the 8k target", len(ctx.Targets), 2},
		{"context cluster priorities re-densified", ctx.Targets[0].Priority, uint32(0)},
		{"context cluster min", ctx.MinContext, 128000},
		{"above every known window: only the unknown-window target", [2]any{len(above.Targets), above.Targets[0].Backend}, [2]any{1, "c"}},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestDrainedTarget(t *testing.T) {
	cfg, err := config.Parse([]byte(yaml), "t.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Models[0].Targets[2].Weight = 0 // drained after load
	g := Build(cfg)
	for _, tg := range g.Pools[1].Targets {
		if tg.Backend == "c" {
			t.Fatal("a weight-0 target still has a locality")
		}
	}
}
