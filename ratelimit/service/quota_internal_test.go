package service

import (
	"strconv"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/ratelimit/src/stats"
	"google.golang.org/protobuf/proto"
)

func entries(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withLimit(d *rlcommon.RateLimitDescriptor, n uint32, u typev3.RateLimitUnit) *rlcommon.RateLimitDescriptor {
	d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: u}
	return d
}

func TestApplyQuotas(t *testing.T) {
	tests := []struct {
		name    string
		in, out *rlcommon.RateLimitDescriptor
	}{
		{"rpm", entries("subkey", "sk_1", "limit", "rpm", "quota", "3"),
			withLimit(entries("subkey", "sk_1", "limit", "rpm"), 3, typev3.RateLimitUnit_MINUTE)},
		{"rpd is a day", entries("subkey", "sk_1", "limit", "rpd", "quota", "100"),
			withLimit(entries("subkey", "sk_1", "limit", "rpd"), 100, typev3.RateLimitUnit_DAY)},
		{"tpm", entries("subkey", "sk_1", "limit", "tpm", "quota", "4294967295"),
			withLimit(entries("subkey", "sk_1", "limit", "tpm"), 4294967295, typev3.RateLimitUnit_MINUTE)},
		{"zero: entry dropped, no override", entries("subkey", "sk_1", "limit", "rpm", "quota", "0"), entries("subkey", "sk_1", "limit", "rpm")},
		{"above 32 bits: no override", entries("subkey", "sk_1", "limit", "rpm", "quota", "4294967296"), entries("subkey", "sk_1", "limit", "rpm")},
		{"not a number: no override", entries("subkey", "sk_1", "limit", "rpm", "quota", "3x"), entries("subkey", "sk_1", "limit", "rpm")},
		{"an override Envoy sent wins", withLimit(entries("subkey", "sk_1", "limit", "rpm", "quota", "3"), 7, typev3.RateLimitUnit_SECOND),
			withLimit(entries("subkey", "sk_1", "limit", "rpm"), 7, typev3.RateLimitUnit_SECOND)},
		{"tenant descriptors untouched", entries("tenant", "t", "limit", "rpm"), entries("tenant", "t", "limit", "rpm")},
		{"quota outside a sub-key descriptor untouched", entries("tenant", "t", "limit", "rpm", "quota", "3"), entries("tenant", "t", "limit", "rpm", "quota", "3")},
		{"sub-key without quota untouched", entries("subkey", "sk_1", "limit", "rpm"), entries("subkey", "sk_1", "limit", "rpm")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			applyQuotas([]*rlcommon.RateLimitDescriptor{tc.in})
			if !proto.Equal(tc.in, tc.out) {
				t.Errorf("got %v, want %v", tc.in, tc.out)
			}
		})
	}
}

type recordingStats struct {
	stats.Manager
	keys map[string]bool
}

func (r *recordingStats) NewStats(key string) stats.RateLimitStats {
	r.keys[key] = true
	return stats.RateLimitStats{Key: key}
}

// Stats of sub-key descriptors are per limit kind, not per key: the store
// keeps every name it was asked for.
func TestSubkeyStatsBounded(t *testing.T) {
	rec := &recordingStats{keys: map[string]bool{}}
	m := newSubkeyStats(rec, "swarmgate")
	for i := range 1000 {
		for _, kind := range []string{"rpm", "rpd", "tpm"} {
			m.NewStats("swarmgate.subkey_sk_" + strconv.Itoa(i) + ".limit_" + kind)
		}
	}
	m.NewStats("swarmgate.tenant_t.limit_rpm")
	m.NewStats("other.subkey_sk_1.limit_rpm")
	want := map[string]bool{"swarmgate.subkey.limit_rpm": true, "swarmgate.subkey.limit_rpd": true, "swarmgate.subkey.limit_tpm": true,
		"swarmgate.tenant_t.limit_rpm": true, "other.subkey_sk_1.limit_rpm": true}
	if len(rec.keys) != len(want) {
		t.Fatalf("stats names %v, want %v", rec.keys, want)
	}
	for k := range want {
		if !rec.keys[k] {
			t.Errorf("no stats %q in %v", k, rec.keys)
		}
	}
}
