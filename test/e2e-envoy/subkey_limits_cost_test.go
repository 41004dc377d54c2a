package e2eenvoy

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/subkey"
)

// subkeyCostConfig: a tenant whose own limits (none ever reached) already
// make the rate-limit filter count every request and its tokens.
const subkeyCostConfig = `
subkeys:
  enabled: true
accounting:
  token_limits: ratelimit
backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
    auth: bearer
    keys:
      - {id: pa-1, secret: env:P_A1}
models:
  - name: gpt-4o-mini
    targets:
      - {backend: relay-a, price: {input_per_mtok: 1, output_per_mtok: 2}}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
    limits: {rpm: 1000000, rpd: 100000000, tpm: 1000000000}
    model_limits:
      gpt-4o-mini: {rpm: 1000000, tpm: 1000000000}
`

// TestSubkeyLimitsShareTheCall: a sub-key's limits ride in the calls Envoy
// makes for its tenant anyway (one at request time, one at stream done):
// no extra round trip to the rate-limit service. It logs the service's
// mean time per call (its duration histogram) and the client's request
// latency for the tenant's config key and for a sub-key with all three
// limits, in alternating phases (docs/ratelimit.md quotes a run).
func TestSubkeyLimitsShareTheCall(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: subkeyCostConfig,
			relays: []relaySpec{{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1"}}}})
		ctx := testCtx(t)
		rdb := redis.NewClient(&redis.Options{Addr: s.redis})
		t.Cleanup(func() { _ = rdb.Close() })
		store := subkey.NewStore(rdb, "sg:subkey:", nil)
		_, plain, err := store.Create(ctx, subkey.Key{Tenant: "team", Parent: "team-1",
			Limits: config.Limits{RPM: 1000000, RPD: 100000000, TPM: 1000000000}})
		if err != nil {
			t.Fatal(err)
		}
		eventually(ctx, t, "the sub-key accepted", func() (bool, string) {
			status, code := s.chatRefusal(ctx, plain)
			return status != http.StatusUnauthorized, code
		})
		const n = 100
		// calls is the service's call count and time so far; Envoy's
		// stream-done call is sent after the client has its answer.
		calls := func() (count, seconds float64) {
			count, err1 := s.metric(ctx, "swarmgate_ratelimit_request_duration_seconds_count", nil)
			seconds, err2 := s.metric(ctx, "swarmgate_ratelimit_request_duration_seconds_sum", nil)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			return count, seconds
		}
		// settled waits until no call came for 150 ms: the stream-done
		// calls of earlier requests have all arrived.
		settled := func() (count, seconds float64) {
			count, seconds = calls()
			for {
				time.Sleep(150 * time.Millisecond)
				c, sec := calls()
				if c == count {
					return c, sec
				}
				count, seconds = c, sec
			}
		}
		for round := range 2 {
			for _, k := range []struct{ name, key string }{{"config key", keyTeam}, {"sub-key with 3 limits", plain}} {
				c0, s0 := settled()
				lat := make([]time.Duration, 0, n)
				for range n {
					begin := time.Now()
					if _, err := s.chat(ctx, k.key, "gpt-4o-mini", "cost"); err != nil {
						t.Fatal(err)
					}
					lat = append(lat, time.Since(begin))
				}
				var c1, s1 float64
				eventually(ctx, t, "every stream-done call", func() (bool, string) {
					c1, s1 = calls()
					return c1-c0 >= 2*n, ""
				})
				if c1, s1 = settled(); c1-c0 != 2*n {
					t.Errorf("%s: %v rate-limit calls for %d requests, want 2 each", k.name, c1-c0, n)
				}
				slices.Sort(lat)
				t.Logf("Envoy %s, round %d, %s: service %.0f µs per call; request p50 %v, p90 %v", r.Version, round+1, k.name,
					(s1-s0)/(c1-c0)*1e6, lat[n/2].Round(time.Microsecond), lat[n*9/10].Round(time.Microsecond))
			}
		}
	})
}
