package keypool

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/config"
)

// key is one API key in a test config.
type key struct {
	id                    string
	weight, rpm, tpm, max int
}

// testConfig builds a validated config with one backend per entry of
// backends (name -> keys) and the given extra top-level YAML.
func testConfig(t testing.TB, extra string, backends map[string][]key) *config.Config {
	t.Helper()
	var b strings.Builder
	b.WriteString(extra)
	b.WriteString("\nbackends:\n")
	env := map[string]string{}
	var names []string
	for name := range backends {
		names = append(names, name)
	}
	for i, name := range names {
		fmt.Fprintf(&b, "  - name: %s\n    base_url: http://127.0.0.1:%d/v1\n    keys:\n", name, 18100+i)
		for _, k := range backends[name] {
			envName := "KP_" + strings.ReplaceAll(strings.ToUpper(k.id), "-", "_")
			env[envName] = "sk-" + k.id
			fmt.Fprintf(&b, "      - {id: %s, secret: env:%s, weight: %d, rpm: %d, tpm: %d, max_in_flight: %d}\n",
				k.id, envName, max(k.weight, 1), k.rpm, k.tpm, k.max)
		}
	}
	b.WriteString("models:\n  - name: m\n    targets:\n")
	for _, name := range names {
		fmt.Fprintf(&b, "      - {backend: %s}\n", name)
	}
	b.WriteString("tenants:\n  - name: t\n    keys:\n      - {id: t1, hash: sha256:4855f154c11c373e2fdbfaa73255b7c171d898177ebea021b0ea7fa93d7a47b6}\n    models: [\"*\"]\n")
	cfg, err := config.Parse([]byte(b.String()), "test.yaml", config.Options{
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	})
	if err != nil {
		t.Fatalf("config: %v\n%s", err, b.String())
	}
	return cfg
}

// breakerYAML is a breaker section with short, test-friendly periods.
func breakerYAML(cooldown, maxCooldown, sync time.Duration, jitter float64, honour bool) string {
	j := fmt.Sprint(jitter)
	if jitter == 0 {
		j = "0.000001" // 0 means "default" in config
	}
	// health_hold 0: tests of the breaker loop see every health flip at
	// once; TestHealthDamping covers the hold.
	return fmt.Sprintf("breaker: {consecutive_429: 3, consecutive_5xx: 2, cooldown: %s, max_cooldown: %s, sync_interval: %s, jitter: %s, honour_remaining: %t, health_hold: 0s}\n",
		cooldown, maxCooldown, sync, j, honour)
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newPools(t testing.TB, cfg *config.Config, opts Options) *Pools {
	t.Helper()
	p, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Breaker.Jitter < 0.001 {
		// The config cannot say 0 (0 means the default 0.2): tests that
		// want exact open periods ask for a tiny jitter and get none.
		pol := *p.pol.Load()
		pol.br.jitter = 0
		p.pol.Store(&pol)
	}
	return p
}

// run starts p.Run until the test ends.
func run(t testing.TB, p *Pools) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func redisClient(t testing.TB, addr string) redis.UniversalClient {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 200 * time.Millisecond,
		WriteTimeout: 200 * time.Millisecond, DialTimeout: 200 * time.Millisecond, MaxRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func pick(t testing.TB, p *Pools, backend string, req PickRequest) Lease {
	t.Helper()
	l, err := p.Pick(context.Background(), backend, req)
	if err != nil {
		t.Fatalf("pick %s %+v: %v", backend, req, err)
	}
	return l
}

func status(code int) Outcome {
	return Outcome{Status: code, RemainingRequests: -1, RemainingTokens: -1}
}

// keyState returns the snapshot of one key.
func stateOf(t testing.TB, p *Pools, keyID string) KeyState {
	t.Helper()
	for _, s := range p.Snapshot() {
		if s.KeyID == keyID {
			return s
		}
	}
	t.Fatalf("no key %s", keyID)
	return KeyState{}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}
