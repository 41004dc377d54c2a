package config

import (
	"strings"
	"time"
)

// Subkeys turns on sub-keys: virtual keys minted at run time under a
// tenant of this file and kept in Redis (docs/subkeys.md). Read once when
// an ext_proc process starts: a reload does not start or stop the store.
type Subkeys struct {
	// Enabled makes ext_proc accept sub-keys besides the tenants' keys.
	Enabled bool `yaml:"enabled" json:"enabled"`
	// RedisPrefix prefixes the store's hash (<prefix>keys) and change
	// channel (<prefix>changed); default <redis.key_prefix>subkey:.
	RedisPrefix string `yaml:"redis_prefix" json:"redis_prefix"`
	// Retention is how long a revoked or expired sub-key stays in the
	// store (listed, audited) before it is deleted; 0 keeps them (prefill
	// sets the default, a month).
	Retention Duration `yaml:"retention" json:"retention"`
	// MaxPerMinter bounds the live (not revoked, not expired) keys one
	// minter may hold at a time; 0 leaves it unbounded (prefill sets the
	// default).
	MaxPerMinter int `yaml:"max_per_minter" json:"max_per_minter"`
}

// defaultMaxPerMinter: a planner of the largest swarms (1,200 workers)
// with room for several runs at once.
const defaultMaxPerMinter = 10000

// defaultSubkeyRetention keeps a finished run's keys a month.
const defaultSubkeyRetention = 30 * 24 * time.Hour

func (c *Config) defaultSubkeys() {
	if c.Subkeys.RedisPrefix == "" {
		c.Subkeys.RedisPrefix = c.Redis.KeyPrefix + "subkey:"
	}
}

func (c *Config) validateSubkeys(v *validator) {
	p := c.Subkeys.RedisPrefix
	switch {
	case strings.ContainsAny(p, " \t\r\n{}"):
		v.add("subkeys.redis_prefix", "must not contain whitespace or braces")
	case len(p) > 128:
		v.add("subkeys.redis_prefix", "must be at most 128 bytes, got %d", len(p))
	}
	if c.Subkeys.MaxPerMinter < 0 {
		v.add("subkeys.max_per_minter", "must not be negative")
	}
	if c.Subkeys.Retention.D() < 0 {
		v.add("subkeys.retention", "must not be negative")
	}
}
