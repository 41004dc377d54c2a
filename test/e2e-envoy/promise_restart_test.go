package e2eenvoy

import (
	"fmt"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoyproc"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/gateway"
)

const restartConfig = `
request:
  message_timeout: 5s
backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
    keys:
      - {id: pa-1, secret: env:P_A1}
models:
  - name: gpt-4o-mini
    targets:
      - {backend: relay-a}
%s
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`

// TestPromiseRestarts: the control plane runs as its own process (here a
// gateway with that role only); while it is down Envoy keeps its last
// config and ext_proc and the rate-limit service keep serving, so traffic
// does not notice; once it is back Envoy reconnects and takes new config.
// An Envoy restarted from the same bootstrap gets everything again from
// the control plane and routes.
func TestPromiseRestarts(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: fmt.Sprintf(restartConfig, ""), splitControlPlane: true, relays: []relaySpec{
			{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1"}},
		}})
		ctx := testCtx(t)
		connected := func(want int64) func() (bool, string) {
			return func() (bool, string) {
				n, err := s.envoyStat(ctx, "control_plane.connected_state")
				return err == nil && n == want, fmt.Sprintf("control_plane.connected_state %d (%v)", n, err)
			}
		}

		t.Run("control plane restart", func(t *testing.T) {
			stop := traffic(t, s, 2)
			served := s.relays["relay-a"].Total().OK
			s.cp.Stop(t)
			eventually(ctx, t, "Envoy to see the control plane gone", connected(0))
			eventually(ctx, t, "traffic while the control plane is down", func() (bool, string) {
				n := s.relays["relay-a"].Total().OK
				return n > served+20, fmt.Sprintf("%d served", n-served)
			})
			s.cp = s.runGateway(gateway.Roles{ControlPlane: true}, "e2e-cp")
			eventually(ctx, t, "Envoy reconnected", connected(1))
			ok, errs := stop()
			if len(errs) != 0 {
				t.Errorf("%d of %d requests failed around the control-plane restart; first: %v", len(errs), ok+len(errs), errs[0])
			}
			// The restarted control plane serves new config.
			s.writeConfig(fmt.Sprintf(restartConfig, "  - name: late\n    targets:\n      - {backend: relay-a}"))
			eventually(ctx, t, "the new model routed", func() (bool, string) {
				_, err := s.chat(ctx, keyTeam, "late", "after the restart")
				return err == nil, fmt.Sprint(err)
			})
		})

		t.Run("Envoy restart", func(t *testing.T) {
			s.envoy.Stop()
			if _, err := s.chat(ctx, keyTeam, "gpt-4o-mini", "nobody listening"); err == nil {
				t.Fatal("a request succeeded with Envoy stopped")
			}
			s.envoy = envoyproc.Start(t, r.Path, s.bootstrapPath)
			s.waitRouted(t)
			for _, model := range []string{"gpt-4o-mini", "late"} {
				if _, err := s.chat(ctx, keyTeam, model, "after the Envoy restart"); err != nil {
					t.Errorf("%s after the Envoy restart: %v", model, err)
				}
			}
		})
	})
}
