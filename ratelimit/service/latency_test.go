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

// TestShouldRateLimitLatency measures ShouldRateLimit round trips on this
// machine (gRPC over loopback, embedded service, local redis-server) and
// logs p50/p99; docs/ratelimit.md quotes a run without -race. The bound it
// checks is loose: it catches a hang or a pathological slowdown, not noise.
func TestShouldRateLimitLatency(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("a measurement: meaningless under -race, and slow there")
	}
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
	for _, tc := range []struct {
		name          string
		chargeRefused bool
		descs         []*rlcommon.RateLimitDescriptor
	}{
		{"envoy request, 5 descriptors", false, envoyLike},
		{"envoy request, 5 descriptors, ChargeRefused (one Redis round trip)", true, envoyLike},
		{"key check, 2 descriptors", false, keyCheck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, service.Options{ChargeRefused: tc.chargeRefused})
			const n = 2000
			lat := make([]time.Duration, 0, n)
			req := &rlspb.RateLimitRequest{Domain: "swarmgate", Descriptors: tc.descs}
			for i := 0; i < n+100; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				begin := time.Now()
				_, err := e.rls.ShouldRateLimit(ctx, req)
				el := time.Since(begin)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				if i >= 100 { // warm-up excluded
					lat = append(lat, el)
				}
			}
			slices.Sort(lat)
			p50, p99 := lat[n/2], lat[n*99/100]
			t.Logf("ShouldRateLimit over %d sequential calls: p50 %v, p99 %v, max %v", n, p50, p99, lat[n-1])
			if p99 > 500*time.Millisecond {
				t.Errorf("p99 %v: the service or Redis is stuck", p99)
			}
		})
	}
}
