package reserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/metricstest"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// holds reads what the tenant, model and money scopes of res hold now.
func holds(t *testing.T, rdb *redis.Client, r *Reserver, res Reservation) (tenant, model, money int64) {
	t.Helper()
	read := func(name string) int64 {
		_, h := r.scopeKeys(r.cfg.Load().Redis.KeyPrefix, res.Tenant, name, res.Model, res.KeyID, res.Month)
		v, err := rdb.HGet(t.Context(), h, "_sum").Int64()
		if errors.Is(err, redis.Nil) {
			return 0
		}
		if err != nil {
			t.Fatalf("reading %s: %v", h, err)
		}
		return v
	}
	return read(ScopeTenant), read(ScopeModel), read(ScopeBudget)
}

// waitFor polls cond until it holds or 15 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func bufferEvents(t *testing.T, reg prometheus.Gatherer, event string) float64 {
	t.Helper()
	v, err := metricstest.Sum(reg, "swarmgate_reserve_settle_buffer_total", map[string]string{"event": event})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSettlesReplayedAfterOutage: reservations made before Redis goes
// down and settled (or released) while it is down are settled once it is
// back, exactly once each, and only after the ledger has drained.
func TestSettlesReplayedAfterOutage(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "10m", "")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	reg := prometheus.NewRegistry()
	var ledgerDrained atomic.Bool
	r := New(c, cfg, Options{Logger: quietLog(), Registerer: reg, RetryInterval: 20 * time.Millisecond,
		LedgerDrained: ledgerDrained.Load})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	rdb := srv.Client()

	reserve := func(id string) Reservation {
		t.Helper()
		res, err := r.Reserve(t.Context(), Request{RequestID: id, Tenant: "acme", Model: "small",
			PromptTokens: 400, MaxOutputTokens: 200, Price: price})
		if err != nil || res.Degraded || len(res.Scopes) != 3 {
			t.Fatalf("reserve %s: %+v %v", id, res, err)
		}
		return res
	}
	settled, released, twice, early := reserve("settled"), reserve("released"), reserve("twice"), reserve("early")
	// "early" settles before the outage and again during it: the replay
	// must not credit it a second time.
	use := func(n int64) pricing.Usage { return pricing.Usage{PromptTokens: n, CompletionTokens: 10} }
	if err := r.Settle(t.Context(), early, use(90), pricing.Money(1000)); err != nil {
		t.Fatal(err)
	}
	tenant, model, money := holds(t, rdb, r, settled)
	if tenant != 3*600+100 || model != 3*600+100 || money == 0 {
		t.Fatalf("before the outage: tenant %d model %d money %d", tenant, model, money)
	}

	// The outage: Redis persists what it holds (as a production Redis with
	// RDB or AOF would) and dies.
	if err := rdb.Save(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for _, step := range []func() error{
		func() error { return r.Settle(t.Context(), settled, use(190), pricing.Money(2000)) },
		func() error { return r.Release(t.Context(), released) },
		func() error { return r.Settle(t.Context(), twice, use(290), pricing.Money(3000)) },
		func() error { return r.Settle(t.Context(), twice, use(290), pricing.Money(3000)) },
		func() error { return r.Settle(t.Context(), early, use(90), pricing.Money(1000)) },
	} {
		if err := step(); err != nil {
			t.Fatalf("settle during the outage returned %v; want it buffered", err)
		}
	}
	if n := r.Pending(); n != 5 {
		t.Fatalf("pending %d, want 5", n)
	}
	if v := bufferEvents(t, reg, "buffered"); v != 5 {
		t.Fatalf("buffered metric %g, want 5", v)
	}

	srv.Restart()
	// The ledger has not replayed yet: the settles wait for it.
	time.Sleep(100 * time.Millisecond)
	if n := r.Pending(); n != 5 {
		t.Fatalf("settles replayed before the ledger drained: %d pending", n)
	}
	ledgerDrained.Store(true)
	waitFor(t, "every settle replayed", func() bool { return r.Pending() == 0 })

	tenant, model, money = holds(t, rdb, r, settled)
	// Real usage stays in the TPM window; the released request and every
	// money hold are gone.
	if want := int64(200 + 300 + 100); tenant != want || model != want {
		t.Errorf("after replay: tenant %d model %d, want %d", tenant, model, want)
	}
	if money != 0 {
		t.Errorf("after replay: money held %d, want 0", money)
	}
	if v := bufferEvents(t, reg, "replayed"); v != 5 {
		t.Errorf("replayed metric %g, want 5", v)
	}
	if v := bufferEvents(t, reg, "dropped"); v != 0 {
		t.Errorf("dropped metric %g, want 0", v)
	}
	// Settled again now that Redis is back: still nothing changes.
	if err := r.Settle(t.Context(), twice, use(290), pricing.Money(3000)); err != nil {
		t.Fatal(err)
	}
	if t2, _, _ := holds(t, rdb, r, settled); t2 != tenant {
		t.Errorf("a later duplicate settle changed the tenant hold: %d -> %d", tenant, t2)
	}
}

// TestSettlesReplayedOnEmptyRedis: a Redis that comes back empty (no
// persistence) lost the holds too; replaying must not drive the sums
// negative.
func TestSettlesReplayedOnEmptyRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "10m", "")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	r := New(c, cfg, Options{Logger: quietLog(), RetryInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	res, err := r.Reserve(t.Context(), Request{RequestID: "lost", Tenant: "acme", Model: "small", PromptTokens: 100, Price: price})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := r.Settle(t.Context(), res, pricing.Usage{PromptTokens: 50}, 0); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	waitFor(t, "the settle replayed", func() bool { return r.Pending() == 0 })
	tenant, model, money := holds(t, srv.Client(), r, res)
	if tenant < 0 || model < 0 || money < 0 || tenant > 50 {
		t.Errorf("after replay on an empty Redis: tenant %d model %d money %d", tenant, model, money)
	}
}

// TestCloseDropsWhatRedisNeverTakes: at shutdown with Redis still down,
// Close gives up within its context and counts the settles dropped.
func TestCloseDropsWhatRedisNeverTakes(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, srv.Addr, "10m", "")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	reg := prometheus.NewRegistry()
	r := New(c, cfg, Options{Logger: quietLog(), Registerer: reg, RetryInterval: 20 * time.Millisecond})
	res, err := r.Reserve(t.Context(), Request{RequestID: "x", Tenant: "tpmonly", PromptTokens: 10, MaxOutputTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := r.Release(t.Context(), res); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := r.Close(ctx); err == nil {
		t.Fatal("Close reported success with a settle never sent")
	}
	if r.Pending() != 0 || bufferEvents(t, reg, "dropped") != 1 {
		t.Errorf("pending %d, dropped %g", r.Pending(), bufferEvents(t, reg, "dropped"))
	}
}

func TestPendingSettlesBounded(t *testing.T) {
	p := func(id string) pendingSettle { return pendingSettle{res: Reservation{RequestID: id}} }
	ids := func(ps []pendingSettle) string {
		s := ""
		for _, x := range ps {
			s += x.res.RequestID
		}
		return s
	}
	tests := []struct {
		name        string
		cap         int
		push        string // one settle per letter
		front       string // then put back in front
		wantDropped string
		wantQueue   string
	}{
		{"fits", 4, "abc", "", "", "abc"},
		{"oldest dropped when full", 2, "abc", "", "a", "bc"},
		{"no buffer", 0, "ab", "", "ab", ""},
		{"put back in front", 4, "cd", "ab", "", "abcd"},
		{"put back beyond capacity drops the oldest", 3, "cd", "ab", "a", "bcd"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := pendingSettles{cap: tc.cap}
			var dropped []pendingSettle
			for _, id := range tc.push {
				if d, _ := q.push(p(string(id))); d != nil {
					dropped = append(dropped, *d)
				}
			}
			if tc.front != "" {
				var batch []pendingSettle
				for _, id := range tc.front {
					batch = append(batch, p(string(id)))
				}
				d, _ := q.pushFront(batch)
				dropped = append(dropped, d...)
			}
			if got := ids(dropped); got != tc.wantDropped {
				t.Errorf("dropped %q, want %q", got, tc.wantDropped)
			}
			if got := ids(q.pop(100)); got != tc.wantQueue {
				t.Errorf("queue %q, want %q", got, tc.wantQueue)
			}
		})
	}
}

type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

func TestRetryable(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{context.DeadlineExceeded, true},
		{redis.ErrClosed, true},
		{fmt.Errorf("wrapped: %w", redisErr("LOADING Redis is loading the dataset in memory")), true},
		{redisErr("READONLY You can't write against a read only replica."), true},
		{redisErr("CLUSTERDOWN The cluster is down"), true},
		{redisErr("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{redisErr("ERR Error running script"), false},
	}
	for _, tc := range tests {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
