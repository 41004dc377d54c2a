// Package redisconn builds the go-redis client for the configured topology
// (standalone, Sentinel or Cluster). Every Redis user in swarmgate takes a
// redis.UniversalClient so the topology is decided here once.
package redisconn

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Option adjusts a client New builds.
type Option func(*redis.UniversalOptions)

// PoolWait is how long a RoundTrip client's call may wait for a pooled
// connection on top of its round trip.
const PoolWait = time.Second

// RoundTrip bounds each command's time on the socket (its write, then its
// read) by d and sends it once: a Redis slower than d fails the call at d.
// Waiting for a pooled connection is bounded apart, by PoolWait (and the
// call's context): a burst of calls queued in this process is congestion,
// not a slow Redis. go-redis applies a context's deadline only while a
// call waits for a connection, so a context of d alone bounded the wait
// and not the round trip: a Redis answering in 300 ms held each 50 ms call
// 300 ms, while 2,000 calls arriving at once failed at 50 ms in the pool.
func RoundTrip(d time.Duration) Option {
	return func(o *redis.UniversalOptions) {
		o.ReadTimeout, o.WriteTimeout = d, d
		o.MaxRetries = -1 // a retry would double the bound
		o.PoolTimeout = PoolWait
	}
}

// RoundTripCall is the longest a RoundTrip(d) client's call takes: the
// wait for a connection, then its write and read.
func RoundTripCall(d time.Duration) time.Duration { return PoolWait + 2*d }

// New returns a client for cfg. It does not dial; the first command does.
func New(cfg config.Redis, opts ...Option) (redis.UniversalClient, error) {
	uo := &redis.UniversalOptions{
		Addrs:       cfg.Addrs,
		Username:    cfg.Username,
		Password:    cfg.Password.Value(),
		DB:          cfg.DB,
		DialTimeout: cfg.DialTimeout.D(),
		ReadTimeout: cfg.ReadTimeout.D(),
		// Writes use the read timeout too: a stuck Redis must not stall the
		// data path longer than the configured bound.
		WriteTimeout: cfg.ReadTimeout.D(),
		MaxRetries:   1,
		// go-redis retries a failed dial several times with back-off by
		// default (seconds per command while Redis is down). Every caller
		// has a fail-open/closed policy, so fail fast and let it decide.
		DialerRetries:      1,
		DialerRetryTimeout: 50 * time.Millisecond,
	}
	for _, o := range opts {
		o(uo)
	}
	if cfg.TLS {
		uo.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch cfg.Mode {
	case "standalone", "":
		return redis.NewClient(uo.Simple()), nil
	case "sentinel":
		uo.MasterName = cfg.MasterName
		return redis.NewFailoverClient(uo.Failover()), nil
	case "cluster":
		return redis.NewClusterClient(uo.Cluster()), nil
	default:
		return nil, fmt.Errorf("redis: unknown mode %q", cfg.Mode)
	}
}
