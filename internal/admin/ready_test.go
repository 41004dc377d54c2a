package admin

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

func TestRedisCheckRequired(t *testing.T) {
	open, closed := config.FailOpen, config.FailClosed
	cases := []struct {
		name     string
		fm       config.FailureModes
		required bool
		why      string
	}{
		{"all open", config.FailureModes{Budget: open, Reservation: open, BreakerSync: open, RateLimit: open, ExtProc: closed}, false, "every Redis use is fail-open"},
		{"budget closed", config.FailureModes{Budget: closed, Reservation: open, BreakerSync: open, RateLimit: open}, true, "failure_modes.budget=closed"},
		{"ratelimit and reservation closed", config.FailureModes{Reservation: closed, RateLimit: closed}, true, "failure_modes.reservation=closed, failure_modes.ratelimit=closed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rc := RedisCheck(nil, c.fm)
			if rc.Required != c.required || !strings.Contains(rc.Why, c.why) {
				t.Errorf("required %v why %q, want %v %q", rc.Required, rc.Why, c.required, c.why)
			}
		})
	}
}

// With a real redis-server: ready while it runs; when it stops, unready if
// a Redis use is fail-closed and merely degraded if all are fail-open.
func TestReadyzRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	cfg := testConfig(t)
	failClosed := cfg.FailureModes
	failClosed.Budget = config.FailClosed
	failOpen := cfg.FailureModes
	failOpen.Budget, failOpen.Reservation, failOpen.BreakerSync, failOpen.RateLimit = config.FailOpen, config.FailOpen, config.FailOpen, config.FailOpen

	closedSrv := startServer(t, Options{Config: func() *config.Config { return cfg }, Ready: []ReadyCheck{RedisCheck(client, failClosed)}})
	openSrv := startServer(t, Options{Config: func() *config.Config { return cfg }, Ready: []ReadyCheck{RedisCheck(client, failOpen)}})

	check := func(url string, wantCode int, wantStatus string, wantReason ...string) {
		t.Helper()
		code, _, body := get(t, url+"/readyz")
		var resp readyResponse
		if err := json.Unmarshal([]byte(body), &resp); err != nil {
			t.Fatal(err)
		}
		if code != wantCode || resp.Status != wantStatus {
			t.Errorf("%d %s, want %d %s: %s", code, resp.Status, wantCode, wantStatus, body)
		}
		if m := contains(strings.Join(resp.Reasons, "\n"), wantReason...); len(m) > 0 {
			t.Errorf("reasons lack %q: %v", m, resp.Reasons)
		}
	}
	check(closedSrv.URL, 200, "ready")
	check(openSrv.URL, 200, "ready")

	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if client.Ping(ctx).Err() == nil {
		t.Fatal("redis still answers after Stop")
	}
	check(closedSrv.URL, 503, "unready", "redis: redis unreachable", "required: failure_modes.budget=closed")
	check(openSrv.URL, 200, "degraded", "not required: every Redis use is fail-open")

	// The live check follows a reload from fail-open to fail-closed.
	var cur atomic.Pointer[config.Config]
	live := *cfg
	live.FailureModes = failOpen
	cur.Store(&live)
	liveSrv := startServer(t, Options{Config: cur.Load, Ready: []ReadyCheck{RedisCheckLive(client, cur.Load)}})
	check(liveSrv.URL, 200, "degraded", "not required")
	reloaded := live
	reloaded.FailureModes = failClosed
	cur.Store(&reloaded)
	check(liveSrv.URL, 503, "unready", "required: failure_modes.budget=closed")

	srv.Restart()
	check(closedSrv.URL, 200, "ready")
	check(liveSrv.URL, 200, "ready")
}
