package translator

import (
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

func TestRateLimitConfig(t *testing.T) {
	cfg := loadTestdata(t, "mixed.yaml")
	got := RateLimitConfig(cfg)
	minute, day := rlsconf.RateLimitUnit_MINUTE, rlsconf.RateLimitUnit_DAY
	l := func(kind string, n uint32, u rlsconf.RateLimitUnit) *rlsconf.RateLimitDescriptor {
		return &rlsconf.RateLimitDescriptor{Key: "limit", Value: kind, RateLimit: &rlsconf.RateLimitPolicy{Unit: u, RequestsPerUnit: n}}
	}
	want := &rlsconf.RateLimitConfig{Name: "swarmgate", Domain: "swarmgate", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "tenant", Value: "acme", Descriptors: []*rlsconf.RateLimitDescriptor{
			l("rpm", 100, minute), l("rpd", 10000, day), l("tpm", 50000, minute),
			{Key: "model", Value: "gpt-4o", Descriptors: []*rlsconf.RateLimitDescriptor{l("rpm", 20, minute), l("tpm", 10000, minute)}},
		}},
		{Key: "tenant", Value: "alpha", Descriptors: []*rlsconf.RateLimitDescriptor{l("rpm", 5, minute)}},
		{Key: "key", Value: "oa-1", Descriptors: []*rlsconf.RateLimitDescriptor{l("rpm", 500, minute), l("tpm", 100000, minute)}},
		{Key: "key", Value: "relay-1", Descriptors: []*rlsconf.RateLimitDescriptor{l("tpm", 50000, minute)}},
	}}
	if !proto.Equal(got, want) {
		t.Errorf("RateLimitConfig:\n got %s\nwant %s", prototext.Format(got), prototext.Format(want))
	}

	// With token_limits: reserve, TPM is ext_proc's job: no tenant TPM leaves,
	// upstream key TPM stays (ext_proc checks it through the service).
	cfg.Accounting.TokenLimits = "reserve"
	got = RateLimitConfig(cfg)
	for _, d := range got.Descriptors {
		if d.Key != "tenant" {
			continue
		}
		for _, c := range d.Descriptors {
			if c.Value == "tpm" {
				t.Errorf("tenant %s has a tpm leaf in reserve mode", d.Value)
			}
			for _, cc := range c.Descriptors {
				if cc.Value == "tpm" {
					t.Errorf("tenant %s model %s has a tpm leaf in reserve mode", d.Value, c.Value)
				}
			}
		}
	}
}
