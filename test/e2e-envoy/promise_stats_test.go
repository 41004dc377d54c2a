package e2eenvoy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/mockupstream"
)

const dottedModelConfig = `
backends:
  - name: relay-a
    base_url: http://{relay-a}/v1
    keys:
      - {id: pa-1, secret: env:P_A1}
models:
  - name: gpt-4.1
    targets: [{backend: relay-a}]
tenants:
  - name: team
    models: ["*"]
    keys:
      - {id: team-1, hash: {keyTeam}}
`

// TestPromiseDottedModelStats: Envoy's own metrics for a model whose name
// has dots (gpt-4.1) carry the whole pool name as envoy_cluster_name. Before,
// Envoy's tag extraction cut the name at the first dot: the tag read
// "pool_gpt-4" and the rest went into the metric's name
// (envoy_cluster_1_upstream_rq_total), so no dashboard found the model.
func TestPromiseDottedModelStats(t *testing.T) {
	envoytest.Each(t, func(t *testing.T, r envoytest.Release) {
		s := startPStack(t, r, pstackOptions{body: dottedModelConfig, relays: []relaySpec{
			{name: "relay-a", auth: config.AuthBearer, keys: map[string]string{"pa-1": "P_A1"},
				opts: func(o *mockupstream.Options) { o.Models = append(o.Models, "gpt-4.1") }},
		}})
		ctx := testCtx(t)
		if _, err := s.chat(ctx, keyTeam, "gpt-4.1", "hello"); err != nil {
			t.Fatal(describeErr(err))
		}
		status, body, err := get(ctx, s.envoyAdmin+"/stats/prometheus", "")
		if err != nil || status != http.StatusOK {
			t.Fatalf("/stats/prometheus: %d %v", status, err)
		}
		var rq []string
		for line := range strings.SplitSeq(body, "\n") {
			if strings.Contains(line, `envoy_cluster_name="pool_gpt-4"`) || strings.HasPrefix(line, "envoy_cluster_1_") {
				t.Errorf("a stat split at the model name's dot: %s", line)
			}
			if strings.HasPrefix(line, "envoy_cluster_upstream_rq_total{") && strings.Contains(line, `envoy_cluster_name="pool_gpt-4_1"`) {
				rq = append(rq, line)
			}
		}
		if len(rq) != 1 || !strings.HasSuffix(rq[0], " 1") {
			t.Errorf("envoy_cluster_upstream_rq_total of pool_gpt-4_1: %q, want one sample of 1", rq)
		}
	})
}
