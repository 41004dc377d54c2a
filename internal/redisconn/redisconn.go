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

// New returns a client for cfg. It does not dial; the first command does.
func New(cfg config.Redis) (redis.UniversalClient, error) {
	opts := &redis.UniversalOptions{
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
	if cfg.TLS {
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch cfg.Mode {
	case "standalone", "":
		return redis.NewClient(opts.Simple()), nil
	case "sentinel":
		opts.MasterName = cfg.MasterName
		return redis.NewFailoverClient(opts.Failover()), nil
	case "cluster":
		return redis.NewClusterClient(opts.Cluster()), nil
	default:
		return nil, fmt.Errorf("redis: unknown mode %q", cfg.Mode)
	}
}
