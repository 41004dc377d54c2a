package service

import (
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// isTopUp sees descriptors after applyQuotas (quota entries removed).
func TestIsTopUp(t *testing.T) {
	tests := []struct {
		name string
		ds   []*rlcommon.RateLimitDescriptor
		want bool
	}{
		{"stream end: tenant, model, sub-key and minter tokens", []*rlcommon.RateLimitDescriptor{
			entries("tenant", "t1", "limit", "tpm"), entries("tenant", "t1", "model", "m1", "limit", "tpm"),
			entries("subkey", "sk_1", "limit", "tpm"), entries("subkey", "sk_0", "limit", "tpm")}, true},
		{"request time: the tenant's rpm comes with its tokens", []*rlcommon.RateLimitDescriptor{
			entries("tenant", "t1", "limit", "rpm"), entries("tenant", "t1", "limit", "tpm"), entries("subkey", "sk_1", "limit", "tpm")}, false},
		{"request time, tokens last", []*rlcommon.RateLimitDescriptor{
			entries("tenant", "t1", "limit", "tpm"), entries("tenant", "t1", "limit", "rpd")}, false},
		{"upstream key: rpm and tpm", []*rlcommon.RateLimitDescriptor{
			entries("key", "k1", "limit", "rpm"), entries("key", "k1", "limit", "tpm")}, false},
		{"a descriptor without a limit entry", []*rlcommon.RateLimitDescriptor{
			entries("tenant", "t1", "limit", "tpm"), entries("tenant", "t1")}, false},
		{"tpm not last", []*rlcommon.RateLimitDescriptor{entries("limit", "tpm", "tenant", "t1")}, false},
		{"empty descriptor", []*rlcommon.RateLimitDescriptor{{}}, false},
		{"no descriptor", nil, false},
	}
	for _, tc := range tests {
		if got := isTopUp(&rlspb.RateLimitRequest{Domain: "swarmgate", Descriptors: tc.ds}); got != tc.want {
			t.Errorf("%s: isTopUp = %v, want %v", tc.name, got, tc.want)
		}
	}
}
