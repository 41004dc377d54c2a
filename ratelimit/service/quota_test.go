package service_test

import (
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/swarmgate/swarmgate/ratelimit/service"
)

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

// subkey is the descriptor Envoy sends for a sub-key's limit: the quota
// entry comes from ext_proc's dynamic metadata.
func subkey(hits *uint64, id, kind, quota string) *rlcommon.RateLimitDescriptor {
	return desc(hits, "subkey", id, "limit", kind, "quota", quota)
}

// Sub-key limits reach the real service as quota entries, with no sub-key
// in its config: each key counts against its own window, rpd is a day
// window, tokens count by hits_addend, and a malformed or zero quota never
// limits.
func TestSubkeyQuotas(t *testing.T) {
	for _, cfgName := range []string{"gateway config", "config without any limit"} {
		t.Run(cfgName, func(t *testing.T) {
			e := start(t, service.Options{})
			if cfgName != "gateway config" {
				e.xds.Set(t, &rlsconf.RateLimitConfig{Name: "swarmgate", Domain: "swarmgate"})
				waitFor(t, func() bool { // the tenant limit of the first config is gone
					r, err := call(t, e.rls, desc(u64(0), "tenant", "small", "limit", "rpm"))
					return err == nil && r.GetStatuses()[0].GetCurrentLimit() == nil
				})
			}
			tests := []struct {
				name  string
				descs []*rlcommon.RateLimitDescriptor
				want  []rlspb.RateLimitResponse_Code
			}{
				{"rpm 3: fourth refused", []*rlcommon.RateLimitDescriptor{subkey(nil, "sk_a", "rpm", "3")}, []rlspb.RateLimitResponse_Code{ok, ok, ok, over}},
				{"another key of the same limit is unaffected", []*rlcommon.RateLimitDescriptor{subkey(nil, "sk_b", "rpm", "3")}, []rlspb.RateLimitResponse_Code{ok, ok, ok, over}},
				{"a raised limit continues the same window", []*rlcommon.RateLimitDescriptor{subkey(nil, "sk_a", "rpm", "5")}, []rlspb.RateLimitResponse_Code{ok, over}},
				{"rpd 2", []*rlcommon.RateLimitDescriptor{subkey(nil, "sk_c", "rpd", "2")}, []rlspb.RateLimitResponse_Code{ok, ok, over}},
				{"tpm 10000 by hits_addend", []*rlcommon.RateLimitDescriptor{subkey(u64(6000), "sk_d", "tpm", "10000")}, []rlspb.RateLimitResponse_Code{ok, over}},
				{"quota 0 never limits", []*rlcommon.RateLimitDescriptor{subkey(nil, "sk_e", "rpm", "0")}, []rlspb.RateLimitResponse_Code{ok, ok, ok}},
				{"malformed quota never limits", []*rlcommon.RateLimitDescriptor{subkey(nil, "sk_e", "rpm", "-1")}, []rlspb.RateLimitResponse_Code{ok, ok, ok}},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					for i, want := range tc.want {
						resp, err := call(t, e.rls, tc.descs...)
						if err != nil {
							t.Fatalf("call %d: %v", i+1, err)
						}
						if got := resp.GetOverallCode(); got != want {
							t.Errorf("call %d: %v, want %v (%v)", i+1, got, want, resp)
						}
					}
				})
			}
			// The answer names the override as the current limit, with
			// the unit of its kind and a reset inside that window.
			resp, err := call(t, e.rls, subkey(u64(0), "sk_c", "rpd", "2"), subkey(u64(0), "sk_a", "rpm", "5"))
			if err != nil {
				t.Fatal(err)
			}
			day, minute := resp.GetStatuses()[0], resp.GetStatuses()[1]
			if l := day.GetCurrentLimit(); l.GetRequestsPerUnit() != 2 || l.GetUnit() != rlspb.RateLimitResponse_RateLimit_DAY {
				t.Errorf("rpd limit %v, want 2 per DAY", l)
			}
			if l := minute.GetCurrentLimit(); l.GetRequestsPerUnit() != 5 || l.GetUnit() != rlspb.RateLimitResponse_RateLimit_MINUTE {
				t.Errorf("rpm limit %v, want 5 per MINUTE", l)
			}
			if r := minute.GetDurationUntilReset().AsDuration(); r <= 0 || r > time.Minute {
				t.Errorf("rpm reset in %v, want within the minute", r)
			}
		})
	}
}
