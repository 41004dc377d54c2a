package e2eenvoy

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/envoytest"
)

// outlierConfig: model spread has two relays at one priority (host-1 with
// three keys, so no key's breaker reaches consecutive_5xx before Envoy's
// host counter does).
const outlierConfig = `
request:
  message_timeout: 5s
retry:
  num_retries: 2
  backoff_base: 5ms
  backoff_max: 50ms
breaker:
  consecutive_5xx: 3
  cooldown: 30s
  sync_interval: 50ms
backends:
  - name: host-1
    base_url: http://{relay-h1}/v1
    keys:
      - {id: h1-1, secret: env:P_A1}
      - {id: h1-2, secret: env:P_A2}
      - {id: h1-3, secret: env:P_B1}
  - name: host-2
    base_url: http://{relay-h2}/v1
    keys:
      - {id: h2-1, secret: env:P_B2}
models:
  - name: spread
    targets:
      - {backend: host-1}
      - {backend: host-2}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`

// TestPromiseOutlierDetection: the outlier detection the control plane
// generates ejects a relay host that answers 5xx, and traffic moves to the
// healthy host of the same priority.
func TestPromiseOutlierDetection(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: outlierConfig, relays: []relaySpec{
			{name: "relay-h1", auth: config.AuthBearer, keys: map[string]string{"h1-1": "P_A1", "h1-2": "P_A2", "h1-3": "P_B1"}},
			{name: "relay-h2", auth: config.AuthBearer, keys: map[string]string{"h2-1": "P_B2"}},
		}})

		t.Run("5xx host ejected", func(t *testing.T) {
			ctx := testCtx(t)
			h1, h2 := s.relays["relay-h1"], s.relays["relay-h2"]
			h1.setHostStatus(http.StatusInternalServerError)
			stat := "cluster." + contract.Pool{Alias: "spread"}.Cluster() + ".outlier_detection.ejections_enforced_consecutive_5xx"
			for i := range 12 {
				if _, err := s.chat(ctx, keyTeam, "spread", fmt.Sprintf("spread %d", i)); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			ejected, err := s.envoyStat(ctx, stat)
			if err != nil {
				t.Fatal(err)
			}
			if ejected != 1 {
				t.Fatalf("%s = %d, want 1", stat, ejected)
			}
			// Ejected: the next requests all go to host-2.
			seenH1, okH2 := len(h1.seenRequests()), h2.Total().OK
			for i := range 6 {
				if _, err := s.chat(ctx, keyTeam, "spread", fmt.Sprintf("after %d", i)); err != nil {
					t.Fatalf("request %d after the ejection: %v", i, err)
				}
			}
			if n := len(h1.seenRequests()) - seenH1; n != 0 {
				t.Errorf("the ejected host saw %d more requests", n)
			}
			if n := h2.Total().OK - okH2; n != 6 {
				t.Errorf("host-2 served %d of 6", n)
			}
			// Envoy's ejection moved the traffic, not the key breakers:
			// host-1's keys each saw fewer 5xx than breaker.consecutive_5xx.
			ks, err := s.keyStates(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"h1-1", "h1-2", "h1-3"} {
				if ks[id].State != "closed" {
					t.Errorf("key %s: %+v, want closed", id, ks[id])
				}
			}
		})

	})
}

// localReplyConfig: two relays of two keys each, so once every key is
// refused a later attempt is the upstream filter's own local reply (no
// relay of the pool has a key). consecutive_5xx: 1 makes Envoy's outlier
// threshold one: a single local 503 counted as the host's would eject it.
// (A pool of one relay has no outlier detection: TestPromiseLoneRelayNotEjected.)
const localReplyConfig = `
request:
  message_timeout: 5s
retry:
  num_retries: 3
  backoff_base: 5ms
  backoff_max: 50ms
breaker:
  consecutive_5xx: 1
  cooldown: 300ms
  auth_cooldown: 300ms
  jitter: 0
  health_hold: 0
  sync_interval: 50ms
backends:
  - name: lone
    base_url: http://{relay-l}/v1
    keys:
      - {id: l-1, secret: env:P_C1}
      - {id: l-2, secret: env:P_C2}
  - name: other
    base_url: http://{relay-m}/v1
    keys:
      - {id: m-1, secret: env:P_A1}
      - {id: m-2, secret: env:P_A2}
models:
  - name: lone
    targets:
      - {backend: lone}
      - {backend: other}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`

// TestPromiseLocalRepliesNeverEject: the upstream filter's local replies
// when a backend has no usable key are not the relay host's answers:
// Envoy's outlier detection must not count them, or a healthy relay whose
// keys are out would be ejected. The 503 (keys failing) is the case that
// matters: Envoy counts every non-5xx, so the 429 (keys busy or rate
// limited) as a success anyway.
func TestPromiseLocalRepliesNeverEject(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: localReplyConfig, relays: []relaySpec{
			{name: "relay-l", auth: config.AuthBearer, keys: map[string]string{"l-1": "P_C1", "l-2": "P_C2"}},
			{name: "relay-m", auth: config.AuthBearer, keys: map[string]string{"m-1": "P_A1", "m-2": "P_A2"}},
		}})
		ctx := testCtx(t)
		l, m := s.relays["relay-l"], s.relays["relay-m"]
		pool := "cluster." + contract.Pool{Alias: "lone"}.Cluster() + ".outlier_detection."
		// The local reply comes from an attempt on either relay.
		pickFailures := func() (float64, error) {
			var sum float64
			for _, b := range []string{"lone", "other"} {
				n, err := s.metric(ctx, "swarmgate_extproc_key_pick_failures_total", map[string]string{"backend": b})
				if err != nil {
					return 0, err
				}
				sum += n
			}
			return sum, nil
		}
		cycle := func(what string, wantStatus int) {
			t.Helper()
			before, err := pickFailures()
			if err != nil {
				t.Fatal(err)
			}
			// Every key refused in turn, then an attempt finds none: the
			// upstream filter answers. Requests in between are refused at
			// admission until the keys reopen (auth_cooldown).
			eventually(ctx, t, what+": a local reply", func() (bool, string) {
				_, err := s.chat(ctx, keyTeam, "lone", what)
				if st := statusOf(err); st != wantStatus {
					return false, fmt.Sprintf("status %d (%v)", st, err)
				}
				n, err := pickFailures()
				return err == nil && n > before, fmt.Sprintf("pick failures %v (err %v)", n, err)
			})
		}
		for i := range 2 {
			l.setHostStatus(http.StatusUnauthorized)
			m.setHostStatus(http.StatusUnauthorized)
			cycle(fmt.Sprintf("keys refused %d", i+1), http.StatusServiceUnavailable)
		}
		l.setHostStatus(0)
		m.setHostStatus(0)
		for _, st := range []string{"ejections_enforced_total", "ejections_detected_consecutive_5xx",
			"ejections_detected_consecutive_gateway_failure", "ejections_detected_consecutive_local_origin_failure"} {
			n, err := s.envoyStat(ctx, pool+st)
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("%s%s = %d: the upstream filter's local replies ejected the relay", pool, st, n)
			}
		}
		// Both relays are still hosts Envoy routes to once their keys reopen.
		okL, okM := l.Total().OK, m.Total().OK
		eventually(ctx, t, "both relays serving again", func() (bool, string) {
			_, err := s.chat(ctx, keyTeam, "lone", "after")
			return err == nil && l.Total().OK > okL && m.Total().OK > okM, fmt.Sprint(err)
		})
	})
}

// loneRelayConfig: one relay of four keys for the model; Envoy would eject
// a host after three consecutive 5xx (consecutive_5xx: 3) for 30 s, while
// no key sees three of them.
const loneRelayConfig = `
request:
  message_timeout: 5s
retry:
  num_retries: 0
breaker:
  consecutive_5xx: 3
  cooldown: 30s
  sync_interval: 50ms
backends:
  - name: lone
    base_url: http://{relay-l}/v1
    keys:
      - {id: l-1, secret: env:P_C1}
      - {id: l-2, secret: env:P_C2}
      - {id: l-3, secret: env:P_A1}
      - {id: l-4, secret: env:P_A2}
models:
  - name: lone
    targets:
      - {backend: lone}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`

// TestPromiseLoneRelayNotEjected: the only relay of a model answers a short
// run of 5xx and recovers. The next request is served: the pool, with
// nowhere to fail over to, has no outlier detection. Before, Envoy ejected
// the only host for the ejection time and answered every request for the
// model "no healthy upstream" (503) for 30 s after the provider was back.
func TestPromiseLoneRelayNotEjected(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: loneRelayConfig, relays: []relaySpec{
			{name: "relay-l", auth: config.AuthBearer, keys: map[string]string{"l-1": "P_C1", "l-2": "P_C2", "l-3": "P_A1", "l-4": "P_A2"}},
		}})
		ctx := testCtx(t)
		l := s.relays["relay-l"]
		l.setHostStatus(http.StatusInternalServerError)
		for i := range 3 { // Envoy's threshold
			if _, err := s.chat(ctx, keyTeam, "lone", fmt.Sprintf("blip %d", i)); statusOf(err) != http.StatusInternalServerError {
				t.Fatalf("request %d during the blip: %v, want the provider's 500", i, err)
			}
		}
		l.setHostStatus(0)
		if _, err := s.chat(ctx, keyTeam, "lone", "after"); err != nil {
			t.Fatalf("the first request after the provider recovered: %s", describeErr(err))
		}
	})
}
