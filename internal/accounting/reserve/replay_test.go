package reserve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
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

// loseReply makes the next settle script run in Redis but fail on the
// client, as a reply lost to a timeout or a reset would.
type loseReply struct{ armed atomic.Bool }

func (h *loseReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *loseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *loseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); err == nil && (n == "evalsha" || n == "eval") && h.armed.CompareAndSwap(true, false) {
			err = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
			cmd.SetErr(err)
		}
		return err
	}
}

// A settle buffered longer than reservation_ttl has nothing left to hold,
// but its cost still belongs in the key budgets' spend counters, which
// the ledger does not keep: the replay counts it there, once, and leaves
// the holds alone. Only when an earlier attempt may have counted it (its
// reply lost) and its settled marker may be gone is it dropped, rather
// than counted twice.
func TestExpiredSettleStillCountsKeySpend(t *testing.T) {
	cost := pricing.FromFloat(0.003)
	u := pricing.Usage{PromptTokens: 1000, CompletionTokens: 1000}
	tests := []struct {
		name      string
		degraded  bool // Redis is already down at admission (failure_modes.budget: open)
		release   bool
		lostReply bool // the settle ran in Redis, its reply was lost
		want      pricing.Money
		event     string // the settle's swarmgate_reserve_settle_buffer_total event
	}{
		{"admitted unreserved, settled during the outage", true, false, false, cost, "replayed"},
		{"reserved, settled during the outage", false, false, false, cost, "replayed"},
		{"released during the outage", false, true, false, 0, "expired"},
		{"counted, reply lost, marker gone", false, false, true, cost, "dropped"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			// Holds and settled markers live 1 s + one 100 ms window.
			cfg := testConfig(t, srv.Addr, "1s", "failure_modes: {budget: open}")
			keys := fakeKeys{"minter": capped(1, "month"), "c": child("minter", capped(0.5, "run"))}
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
			lose := &loseReply{}
			c.AddHook(lose)
			t.Cleanup(func() { _ = c.Close() })
			reg := prometheus.NewRegistry()
			r := New(c, cfg, Options{Logger: quietLog(), Registerer: reg, Keys: keys, Window: 100 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
			ctx := t.Context()
			rdb := srv.Client()
			if tc.degraded {
				srv.Stop()
			}
			res, err := r.Reserve(ctx, Request{RequestID: "out", Tenant: "tree", Model: "big", KeyID: "c", PromptTokens: 1000, MaxOutputTokens: 1000, Price: price})
			if err != nil || res.Degraded != tc.degraded || len(res.Keys) != 2 {
				t.Fatalf("reserve: %+v %v", res, err)
			}
			lose.armed.Store(tc.lostReply)
			if !tc.degraded && !tc.lostReply {
				if err := rdb.Save(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				srv.Stop()
			}
			if tc.release {
				err = r.Release(ctx, res)
			} else {
				err = r.Settle(ctx, res, u, cost)
			}
			if err != nil || r.Pending() != 1 {
				t.Fatalf("settle: %v, %d pending; want it buffered", err, r.Pending())
			}
			if tc.lostReply {
				if err := rdb.Save(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				srv.Stop()
			}
			time.Sleep(1300 * time.Millisecond) // past the TTL and the marker
			srv.Restart()
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { r.Run(rctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })
			waitFor(t, "the buffered settle handled", func() bool { return r.Pending() == 0 })
			for _, k := range []struct{ id, period string }{{"c", "run"}, {"minter", "month"}} {
				if got := spent(t, rdb, cfg, k.id, k.period); got != tc.want {
					t.Errorf("%s spent %s after the outage, want %s", k.id, got, tc.want)
				}
			}
			if v := bufferEvents(t, reg, tc.event); v != 1 {
				t.Errorf("%s events %g, want 1", tc.event, v)
			}
			if tc.event != "replayed" {
				return
			}
			// The replay left its marker: a duplicate counts nothing more.
			if err := r.Settle(ctx, res, u, cost); err != nil {
				t.Fatal(err)
			}
			if got := spent(t, rdb, cfg, "c", "run"); got != tc.want {
				t.Errorf("after a duplicate settle: spent %s, want %s", got, tc.want)
			}
		})
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

// retryable: worth buffering; mayHaveRun: the script may have run though
// the call failed, so a replay long after may find no marker to stop it.
func TestRetryable(t *testing.T) {
	tests := []struct {
		err       error
		want, ran bool
	}{
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true, false},
		{fmt.Errorf("wrapped: %w", &net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded}), true, false},
		{&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, true, true},
		{io.EOF, true, true},
		{context.DeadlineExceeded, true, true},
		{redis.ErrClosed, true, false},
		{redis.ErrPoolTimeout, true, false},
		{fmt.Errorf("wrapped: %w", redisErr("LOADING Redis is loading the dataset in memory")), true, false},
		{redisErr("READONLY You can't write against a read only replica."), true, false},
		{redisErr("CLUSTERDOWN The cluster is down"), true, false},
		{redisErr("WRONGTYPE Operation against a key holding the wrong kind of value"), false, false},
		{redisErr("ERR Error running script"), false, false},
	}
	for _, tc := range tests {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
		if got := mayHaveRun(tc.err); got != tc.ran {
			t.Errorf("mayHaveRun(%v) = %v, want %v", tc.err, got, tc.ran)
		}
	}
}
