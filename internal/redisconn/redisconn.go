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

// Bounded makes each command's context deadline bound its reads and writes
// on the socket too. By default go-redis applies a context only while it
// waits for a pooled connection; the read is bounded by read_timeout
// alone, so a 50 ms bound on a call to a Redis that answers in 300 ms
// took 300 ms. A command cut short this way costs its connection (go-redis
// closes it), so only callers that need a tight bound use it.
func Bounded() Option {
	return func(o *redis.UniversalOptions) { o.ContextTimeoutEnabled = true }
}

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
