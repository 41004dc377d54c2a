package service_test

import (
	"context"
	"slices"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/swarmgate/swarmgate/ratelimit/service"
)

// BenchmarkShouldRateLimit measures ShouldRateLimit round trips on this
// machine (gRPC over loopback, embedded service, local redis-server) and
// reports p50/p99 (docs/ratelimit.md quotes a run): `go test -bench
// ShouldRateLimit ./ratelimit/service/`.
func BenchmarkShouldRateLimit(b *testing.B) {
	envoyLike := []*rlcommon.RateLimitDescriptor{ // what the Envoy filter sends per request
		desc(nil, "tenant", "t1", "limit", "rpm"),
		desc(nil, "tenant", "t1", "limit", "rpd"),
		desc(nil, "tenant", "t1", "model", "m1", "limit", "rpm"),
		desc(u64(500), "tenant", "t1", "limit", "tpm"),
		desc(u64(500), "tenant", "t1", "model", "m1", "limit", "tpm"),
	}
	keyCheck := []*rlcommon.RateLimitDescriptor{ // what keylimit sends per attempt
		desc(nil, "key", "k1", "limit", "rpm"),
		desc(u64(500), "key", "k1", "limit", "tpm"),
	}
	// A sub-key with all three limits adds three descriptors whose quota
	// entries become limit overrides (quota.go).
	withSubkey := append(slices.Clone(envoyLike),
		desc(nil, "subkey", "sk_1", "limit", "rpm", "quota", "1000000"),
		desc(nil, "subkey", "sk_1", "limit", "rpd", "quota", "1000000"),
		desc(u64(500), "subkey", "sk_1", "limit", "tpm", "quota", "1000000000"))
	// The same sub-key descriptors as tenant-like config entries would be
	// (no override): what per-key config would cost on the service.
	withKeyLike := append(slices.Clone(envoyLike),
		desc(nil, "tenant", "t1", "limit", "rpm"),
		desc(nil, "tenant", "t1", "limit", "rpd"),
		desc(u64(500), "tenant", "t1", "limit", "tpm"))
	for _, tc := range []struct {
		name          string
		chargeRefused bool
		descs         []*rlcommon.RateLimitDescriptor
	}{
		{"envoy request, 5 descriptors", false, envoyLike},
		{"envoy request with a sub-key, 5+3 descriptors by override", false, withSubkey},
		{"envoy request, 5+3 descriptors from config", false, withKeyLike},
		{"envoy request, 5 descriptors, ChargeRefused (one Redis round trip)", true, envoyLike},
		{"key check, 2 descriptors", false, keyCheck},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := start(b, service.Options{ChargeRefused: tc.chargeRefused})
			req := &rlspb.RateLimitRequest{Domain: "swarmgate", Descriptors: tc.descs}
			for range 100 { // warm-up
				if _, err := e.rls.ShouldRateLimit(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				begin := time.Now()
				_, err := e.rls.ShouldRateLimit(ctx, req)
				el := time.Since(begin)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, el)
			}
			b.StopTimer()
			slices.Sort(lat)
			n := len(lat)
			b.ReportMetric(float64(lat[n/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[n*99/100].Microseconds()), "p99-µs")
		})
	}
}
