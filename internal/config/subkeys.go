package config

import "strings"

// Subkeys turns on sub-keys: virtual keys minted at run time under a
// tenant of this file and kept in Redis (docs/subkeys.md). Read once when
// an ext_proc process starts: a reload does not start or stop the store.
type Subkeys struct {
	// Enabled makes ext_proc accept sub-keys besides the tenants' keys.
	Enabled bool `yaml:"enabled" json:"enabled"`
	// RedisPrefix prefixes the store's hash (<prefix>keys) and change
	// channel (<prefix>changed); default <redis.key_prefix>subkey:.
	RedisPrefix string `yaml:"redis_prefix" json:"redis_prefix"`
}

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
}
