package config

import (
	"strings"
	"testing"
)

func TestSubkeysDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, redis, subkeys, want string
		enabled                    bool
	}{
		{"off by default", "", "", "sg:subkey:", false},
		{"follows redis.key_prefix", "  key_prefix: \"prod:\"\n", "subkeys: {enabled: true}\n", "prod:subkey:", true},
		{"own prefix", "", "subkeys: {enabled: true, redis_prefix: \"keys:\"}\n", "keys:", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := strings.Replace(string(DefaultYAML()), "redis:\n", "redis:\n"+tc.redis, 1) + tc.subkeys
			c, err := Parse([]byte(y), "t.yaml", Options{SkipSecrets: true})
			if err != nil {
				t.Fatal(err)
			}
			if c.Subkeys.RedisPrefix != tc.want || c.Subkeys.Enabled != tc.enabled {
				t.Fatalf("got %+v, want prefix %q enabled %v", c.Subkeys, tc.want, tc.enabled)
			}
		})
	}
}
