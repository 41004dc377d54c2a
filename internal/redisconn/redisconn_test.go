package redisconn

import (
	"context"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// TestRoundTripBound: a Redis that answers late (paused 1 s) holds a
// default client's call, even past its context's 50 ms deadline, up to
// read_timeout; a RoundTrip(50 ms) client's call fails at 50 ms.
func TestRoundTripBound(t *testing.T) {
	srv := redistest.Start(t)
	cfg := config.Redis{Addrs: []string{srv.Addr}, DialTimeout: config.Duration{Duration: time.Second},
		ReadTimeout: config.Duration{Duration: 2 * time.Second}}
	cases := []struct {
		name    string
		opts    []Option
		bounded bool
	}{
		{"default", nil, false},
		{"round trip 50ms", []Option{RoundTrip(50 * time.Millisecond)}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rdb, err := New(cfg, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			// A pooled connection first: the bound under test is the
			// round trip, not the dial.
			if err := rdb.Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			if err := srv.Client().ClientPause(context.Background(), time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			err = rdb.Ping(ctx).Err()
			took := time.Since(start)
			if c.bounded && (err == nil || took >= 600*time.Millisecond) {
				t.Fatalf("bounded client: %v after %s, want a timeout at the 50 ms round trip", err, took)
			}
			if !c.bounded && took < 600*time.Millisecond {
				t.Fatalf("default client answered in %s (%v): the pause did not hold it, the test proves nothing", took, err)
			}
			time.Sleep(time.Second) // the pause ends before the next case
		})
	}
}
