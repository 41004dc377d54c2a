package e2eenvoy

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
)

// weightsConfig is a model on relays a and b at one priority, weighted
// wa:wb.
func weightsConfig(wa, wb int) string {
	return reloadHead + fmt.Sprintf(`backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
    keys:
      - {id: pa-1, secret: env:P_A1}
  - name: relay-b
    base_url: http://{relay-b}/v1
    keys:
      - {id: pb-1, secret: env:P_B1}
models:
  - name: gpt-4o-mini
    targets:
      - {backend: relay-a, weight: %d}
      - {backend: relay-b, weight: %d}
`, wa, wb)
}

// TestPromiseTargetWeights: Envoy splits a model's requests between its
// targets by their configured weights (the control plane sends them as
// EDS locality weights with locality-weighted balancing), and a config
// edit that changes only the weights moves the split without a restart
// (an EDS update of the weights alone, as admission.capacity_weights
// pushes them).
func TestPromiseTargetWeights(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: weightsConfig(3, 1), relays: []relaySpec{
			{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1"}},
			{name: "relay-b", auth: config.AuthBearer, keys: map[string]string{"pb-1": "P_B1"}},
		}})
		ctx := testCtx(t)
		const n = 400
		// 3:1 → relay-a's share 0.75; the band is about four binomial
		// standard deviations either way (Envoy's weighted round robin is
		// closer than that).
		share := s.shareOfA(ctx, t, n)
		t.Logf("3:1: relay-a took %.3f", share)
		if share < 0.66 || share > 0.84 {
			t.Fatalf("3:1: relay-a took %.2f of %d requests, want about 0.75", share, n)
		}

		s.writeConfig(weightsConfig(1, 3))
		eventually(ctx, t, "the split to follow the new weights", func() (bool, string) {
			share := s.shareOfA(ctx, t, 40)
			return share <= 0.4, fmt.Sprintf("relay-a took %.2f of the last 40", share)
		})
		share = s.shareOfA(ctx, t, n)
		t.Logf("1:3: relay-a took %.3f", share)
		if share < 0.16 || share > 0.34 {
			t.Fatalf("1:3: relay-a took %.2f of %d requests, want about 0.25", share, n)
		}
	})
}

// shareOfA sends n chat completions from four clients at once and returns
// the share relay-a served; every request must succeed.
func (s *pstack) shareOfA(ctx context.Context, t *testing.T, n int) float64 {
	t.Helper()
	a0, b0 := s.relays["relay-a"].Total().OK, s.relays["relay-b"].Total().OK
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				if _, err := s.chat(ctx, keyTeam, "gpt-4o-mini", fmt.Sprintf("weights %d", i)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("request failed: %v", err)
	}
	a, b := s.relays["relay-a"].Total().OK-a0, s.relays["relay-b"].Total().OK-b0
	if a+b != n {
		t.Fatalf("relays served %d + %d of %d requests", a, b, n)
	}
	return float64(a) / float64(n)
}
