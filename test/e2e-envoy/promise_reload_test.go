package e2eenvoy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

const reloadHead = `
request:
  message_timeout: 5s
retry:
  num_retries: 2
  backoff_base: 5ms
  backoff_max: 50ms
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`

// reloadConfig is the config with the named backends (relays of a, b, c),
// the targets of gpt-4o-mini being those named in targets, all at one
// priority.
func reloadConfig(backends, targets string) string {
	var b strings.Builder
	b.WriteString(reloadHead)
	b.WriteString("backends:\n")
	secrets := map[rune]string{'a': "P_A1", 'b': "P_B1", 'c': "P_C1"}
	for _, r := range backends {
		fmt.Fprintf(&b, "  - name: relay-%[1]c\n    base_url: http://{relay-%[1]c}/v1\n    keys:\n      - {id: p%[1]c-1, secret: env:%[2]s}\n", r, secrets[r])
	}
	b.WriteString("models:\n  - name: gpt-4o-mini\n    targets:\n")
	for _, r := range targets {
		fmt.Fprintf(&b, "      - {backend: relay-%c}\n", r)
	}
	return b.String()
}

// traffic runs workers sending chat completions until stop is called,
// which returns the errors they saw.
func traffic(t *testing.T, s *pstack, workers int) (stop func() (ok int, errs []error)) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	ok := 0
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				_, err := s.chat(ctx, keyTeam, "gpt-4o-mini", fmt.Sprintf("worker %d request %d", w, i))
				if ctx.Err() != nil {
					return
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					ok++
				}
				mu.Unlock()
			}
		}()
	}
	return func() (int, []error) {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return ok, errs
	}
}

// TestPromiseReloadUnderTraffic: config reloads that add a relay and then
// remove one while requests flow: no request fails, the added relay takes
// traffic and the removed one stops getting any. Adding and removing a
// backend changes the identity key derived from the provider keys, so
// requests admitted just before a reload are verified after it with the
// replaced key (extproc keyRing).
//
// The relay is removed in one reload, target and backend: the gateway
// applies it in two steps (gateway/retire.go), so attempts Envoy still
// routes to the old endpoint find an ext_proc that knows the backend.
// Applied at once, 3-5 of them per run were answered 503
// gateway_not_admitted.
func TestPromiseReloadUnderTraffic(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		slow := func(o *mockupstream.Options) { o.Default = mockupstream.Behavior{Latency: 20 * time.Millisecond} }
		s := startPStack(t, r, pstackOptions{body: reloadConfig("ab", "ab"), relays: []relaySpec{
			{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1"}, opts: slow},
			{name: "relay-b", auth: config.AuthBearer, keys: map[string]string{"pb-1": "P_B1"}, opts: slow},
			{name: "relay-c", auth: config.AuthBearer, keys: map[string]string{"pc-1": "P_C1"}, opts: slow},
		}})
		ctx := testCtx(t)
		stop := traffic(t, s, 6)

		s.writeConfig(reloadConfig("abc", "abc"))
		eventually(ctx, t, "relay-c taking traffic", func() (bool, string) {
			n := s.relays["relay-c"].Total().OK
			return n >= 5, fmt.Sprintf("relay-c served %d", n)
		})
		s.writeConfig(reloadConfig("ac", "ac"))
		var lastB int
		quiet := time.Time{}
		eventually(ctx, t, "relay-b drained", func() (bool, string) {
			n := s.relays["relay-b"].Total().Requests
			if n != lastB || quiet.IsZero() {
				lastB, quiet = n, time.Now()
			}
			return time.Since(quiet) > time.Second, fmt.Sprintf("relay-b still getting requests (%d)", n)
		})
		okA, okC := s.relays["relay-a"].Total().OK, s.relays["relay-c"].Total().OK
		eventually(ctx, t, "traffic on relay-a and relay-c", func() (bool, string) {
			a, c := s.relays["relay-a"].Total().OK, s.relays["relay-c"].Total().OK
			return a > okA+5 && c > okC+5, fmt.Sprintf("relay-a %d, relay-c %d", a-okA, c-okC)
		})
		ok, errs := stop()
		if n := s.relays["relay-b"].Total().Requests; n != lastB {
			t.Errorf("relay-b got %d requests after it was drained", n-lastB)
		}
		t.Logf("Envoy %s: %d requests served across three reloads, %d failed", r.Version, ok, len(errs))
		for i, err := range errs {
			if i == 5 {
				t.Errorf("… and %d more", len(errs)-i)
				break
			}
			t.Errorf("request failed during the reloads: %v", err)
		}
	})
}
