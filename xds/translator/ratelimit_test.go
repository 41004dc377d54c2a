package translator

import (
	"fmt"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
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

// The rate-limit service tells Envoy's stream-end call from a request-time
// one by its descriptors (ratelimit/service isTopUp): a call made only of
// token descriptors ([..., limit=tpm] once the service removed a sub-key's
// quota) is a top-up and charges every window in full. That holds while
// only token descriptors are apply_on_stream_done and every request-time
// call carries [tenant, limit=rpm], which needs nothing but the tenant.
func TestStreamDoneCallShape(t *testing.T) {
	key := func(a *routev3.RateLimit_Action) (string, string) {
		if m := a.GetMetadata(); m != nil {
			return m.GetDescriptorKey(), ""
		}
		g := a.GetGenericKey()
		return g.GetDescriptorKey(), g.GetDescriptorValue()
	}
	for _, g := range []*ir.Gateway{{}, {TokenLimits: true}, {Subkeys: true}, {TokenLimits: true, Subkeys: true}} {
		name := fmt.Sprintf("token_limits=%v subkeys=%v", g.TokenLimits, g.Subkeys)
		tenantRPM := false
		for i, rl := range rateLimits(g) {
			acts := rl.GetActions()
			if !rl.GetApplyOnStreamDone() {
				if len(acts) == 2 && rl.GetHitsAddend() == nil {
					k0, _ := key(acts[0])
					k1, v1 := key(acts[1])
					m := acts[0].GetMetadata()
					tenantRPM = tenantRPM || k0 == contract.DescTenant && !m.GetSkipIfAbsent() && m.GetDefaultValue() == "" &&
						k1 == contract.DescLimit && v1 == contract.LimitRPM
				}
				continue
			}
			if k, _ := key(acts[0]); k == contract.DescSubkey {
				if k, _ := key(acts[len(acts)-1]); k == contract.DescQuota {
					acts = acts[:len(acts)-1] // removed by the service (applyQuotas)
				}
			}
			if k, v := key(acts[len(acts)-1]); k != contract.DescLimit || v != contract.LimitTPM {
				t.Errorf("%s: rate_limits[%d] is applied on stream done and does not end in limit=tpm: %v", name, i, rl)
			}
		}
		if !tenantRPM {
			t.Errorf("%s: no request-time [tenant, limit=rpm] descriptor that needs only the tenant", name)
		}
	}
}
