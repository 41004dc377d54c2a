package translator

import (
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/xds/ir"
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

// Sub-keys add descriptors to Envoy's filter and nothing to the service's
// config: their limits arrive as quota entries the service turns into
// overrides. A config key sends none of them (no quota metadata). Four
// for the caller's own limits, four for its minter's.
func TestSubkeysAddDescriptorsOnly(t *testing.T) {
	off := loadTestdata(t, "default.yaml")
	on := loadTestdata(t, "subkeys.yaml")
	if !proto.Equal(RateLimitConfig(off), RateLimitConfig(on)) {
		t.Error("sub-keys changed the rate-limit service's config")
	}
	offF, onF := RateLimitFilter(ir.Build(off)), RateLimitFilter(ir.Build(on))
	if got, want := len(onF.RateLimits)-len(offF.RateLimits), 8; got != want {
		t.Fatalf("sub-keys added %d descriptors, want %d", got, want)
	}
	for i, rl := range onF.RateLimits[len(offF.RateLimits):] {
		acts := rl.GetActions()
		first, last := acts[0].GetMetadata(), acts[len(acts)-1].GetMetadata()
		if first.GetDescriptorKey() != contract.DescSubkey || last.GetDescriptorKey() != contract.DescQuota || last.GetSkipIfAbsent() {
			t.Errorf("descriptor %d: %v; want subkey first and a quota that must be present last", i, acts)
		}
		if rl.GetLimit() != nil {
			t.Errorf("descriptor %d carries RateLimit.limit, which Envoy 1.38 refuses in filter-level rate_limits", i)
		}
	}
}
