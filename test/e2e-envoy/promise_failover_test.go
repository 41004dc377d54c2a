package e2eenvoy

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/envoytest"
)

// failoverConfig: relay-a serves at priority 0, relay-b takes over at
// priority 1. Short open periods so a recovered relay comes back within the
// test; health_hold damps the third down inside the flap window.
const failoverConfig = `
request:
  message_timeout: 5s
retry:
  num_retries: 2
  backoff_base: 5ms
  backoff_max: 50ms
breaker:
  consecutive_5xx: 1
  cooldown: 300ms
  max_cooldown: 4s
  jitter: 0
  sync_interval: 50ms
  auth_cooldown: 300ms
  health_hold: 1500ms
backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
    keys:
      - {id: pa-1, secret: env:P_A1}
      - {id: pa-2, secret: env:P_A2}
  - name: relay-b
    base_url: http://{relay-b}/openai/v1
    auth: x-api-key
    keys:
      - {id: pb-1, secret: env:P_B1}
models:
  - name: gpt-4o-mini
    targets:
      - {backend: relay-a}
      - {backend: relay-b, model: openai/gpt-4o-mini, priority: 1}
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`

// TestPromiseOutageFailover: relay-a's whole pool goes down; clients see
// no error (the retry moves to priority 1, then EDS drains relay-a), and
// once relay-a recovers traffic returns to it.
//
//   - Refused credentials (every key 401, as when an account is suspended):
//     the keys' breakers alone take relay-a out. The first two downs come
//     back after breaker.auth_cooldown; the third inside the flap window is
//     damped: relay-a stays out for at least breaker.health_hold.
//   - 5xx from the relay host: Envoy's outlier detection (generated with
//     the breaker's thresholds) ejects it too, and an ejected host is
//     let back only at the detector's next interval tick, so the return
//     takes up to that interval (10 s) whatever the cooldown.
func TestPromiseOutageFailover(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: failoverConfig, relays: []relaySpec{
			{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1", "pa-2": "P_A2"}},
			{name: "relay-b", auth: config.AuthXAPIKey, keys: map[string]string{"pb-1": "P_B1"}},
		}})
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		a, b := s.relays["relay-a"], s.relays["relay-b"]
		// clientErrs counts the client errors of each phase.
		var clientErrs int
		var firstErr error
		send := func() {
			if _, err := s.chat(ctx, keyTeam, "gpt-4o-mini", "outage"); err != nil {
				clientErrs++
				firstErr = cmp.Or(firstErr, err)
			}
		}
		// outage makes relay-a answer status until it is drained, then
		// recovers it and returns how long after the outage began it
		// served again.
		outage := func(what string, status int) time.Duration {
			down := time.Now()
			a.setHostStatus(status)
			// Drained: three requests in a row served by relay-b without
			// touching relay-a.
			streak := 0
			eventually(ctx, t, what+": relay-a drained", func() (bool, string) {
				before, bBefore := len(a.seenRequests()), b.Total().OK
				send()
				if len(a.seenRequests()) != before || b.Total().OK != bBefore+1 {
					streak = 0
					return false, "relay-a still tried"
				}
				streak++
				return streak >= 3, fmt.Sprintf("streak %d", streak)
			})
			a.setHostStatus(0)
			okBefore := a.Total().OK
			eventually(ctx, t, what+": relay-a back", func() (bool, string) {
				send()
				return a.Total().OK > okBefore, "relay-a not serving yet"
			})
			return time.Since(down)
		}

		var back []time.Duration
		for flap := 1; flap <= 3; flap++ {
			back = append(back, outage(fmt.Sprintf("401 outage %d", flap), http.StatusUnauthorized))
		}
		if back[2] < 1500*time.Millisecond {
			t.Errorf("third outage: relay-a back after %v, before health_hold 1.5s (not damped)", back[2])
		}
		if clientErrs != 0 {
			t.Errorf("%d client errors during the 401 outages: %v", clientErrs, firstErr)
		}
		clientErrs, firstErr = 0, nil
		pool := contract.Pool{Alias: "gpt-4o-mini"}.Cluster()
		ejected, err := s.envoyStat(ctx, "cluster."+pool+".outlier_detection.ejections_enforced_total")
		if err != nil {
			t.Fatal(err)
		}
		if ejected != 0 {
			t.Errorf("401s ejected relay-a %d times; only 5xx and local-origin failures may", ejected)
		}
		five := outage("5xx outage", http.StatusInternalServerError)
		ejected, err = s.envoyStat(ctx, "cluster."+pool+".outlier_detection.ejections_enforced_total")
		if err != nil {
			t.Fatal(err)
		}
		if ejected < 1 {
			t.Errorf("relay-a answering 5xx was not ejected by outlier detection")
		}
		if clientErrs != 0 {
			t.Errorf("%d client errors during the 5xx outage: %v", clientErrs, firstErr)
		}
		t.Logf("Envoy %s: relay-a served again %v after each 401 outage began (auth_cooldown 300ms, health_hold 1.5s), %v after the 5xx outage (%d ejections)",
			r.Version, back, five, ejected)
	})
}
