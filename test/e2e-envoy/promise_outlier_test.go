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

// localReplyConfig: one relay, two keys, no other relay in the pool, so
// once both keys are refused a later attempt is the upstream filter's own
// local reply. consecutive_5xx: 1 makes Envoy's outlier threshold one: a
// single local 503 counted as the host's would eject it.
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
		}})
		ctx := testCtx(t)
		l := s.relays["relay-l"]
		pool := "cluster." + contract.Pool{Alias: "lone"}.Cluster() + ".outlier_detection."
		cycle := func(what string, wantStatus int) {
			t.Helper()
			before, err := s.metric(ctx, "swarmgate_extproc_key_pick_failures_total", map[string]string{"backend": "lone"})
			if err != nil {
				t.Fatal(err)
			}
			// Both keys refused in turn, then an attempt finds none: the
			// upstream filter answers. Requests in between are refused at
			// admission until the keys reopen (auth_cooldown).
			eventually(ctx, t, what+": a local reply", func() (bool, string) {
				_, err := s.chat(ctx, keyTeam, "lone", what)
				if st := statusOf(err); st != wantStatus {
					return false, fmt.Sprintf("status %d (%v)", st, err)
				}
				n, err := s.metric(ctx, "swarmgate_extproc_key_pick_failures_total", map[string]string{"backend": "lone"})
				return err == nil && n > before, fmt.Sprintf("pick failures %v (err %v)", n, err)
			})
		}
		for i := range 2 {
			l.setHostStatus(http.StatusUnauthorized)
			cycle(fmt.Sprintf("keys refused %d", i+1), http.StatusServiceUnavailable)
		}
		l.setHostStatus(0)
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
		// The relay is still a host Envoy routes to once its keys reopen.
		okBefore := l.Total().OK
		eventually(ctx, t, "the relay serving again", func() (bool, string) {
			_, err := s.chat(ctx, keyTeam, "lone", "after")
			return err == nil && l.Total().OK > okBefore, fmt.Sprint(err)
		})
	})
}
