package telemetry

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

func TestRedisMetrics(t *testing.T) {
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	hook := NewRedisMetrics(reg)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(hook)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, "missing").Err(); err != redis.Nil {
		t.Fatalf("get missing: %v", err)
	}
	if err := c.Incr(ctx, "k").Err(); err == nil { // WRONGTYPE-ish: not an integer
		t.Fatal("incr of a string succeeded")
	}
	// A pipeline with one failing command among three.
	pipe := c.Pipeline()
	pipe.Set(ctx, "n", "1", 0)
	pipe.Incr(ctx, "k")
	pipe.Incr(ctx, "n")
	_, _ = pipe.Exec(ctx)

	srv.Stop()
	if err := c.Get(ctx, "k").Err(); err == nil {
		t.Fatal("get after stop succeeded")
	}

	fams := scrape(t, reg)
	counts := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{MetricRedisCommands, map[string]string{"command": "set"}, 2},
		{MetricRedisCommands, map[string]string{"command": "get"}, 2},
		{MetricRedisCommands, map[string]string{"command": "incr"}, 3},
		{MetricRedisErrors, map[string]string{"command": "incr", "kind": RedisErrServer}, 2},
		{MetricRedisErrors, map[string]string{"command": "get", "kind": RedisErrNetwork}, 1},
	}
	for _, c := range counts {
		if got := series(t, fams, c.name, c.labels).GetCounter().GetValue(); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// redis.Nil is not an error, the set commands never failed, and the
	// connection handshake's CLIENT SETINFO, which Redis before 7.2 does
	// not know and go-redis ignores, is not one either.
	for _, m := range fams[MetricRedisErrors].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "command" && (l.GetValue() == "set" || l.GetValue() == "client") {
				t.Errorf("%s counted as error: %v", l.GetValue(), m)
			}
		}
	}
	if got := series(t, fams, MetricRedisErrors, map[string]string{"command": "dial", "kind": RedisErrDial}).GetCounter().GetValue(); got < 1 {
		t.Errorf("dial errors = %v, want >= 1", got)
	}
}
