package e2eenvoy

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/swarmgate/swarmgate/xds/translator"
)

// TestHarnessWithoutEnvoy runs everything but Envoy, so the harness itself
// (config, in-process gateway, bootstrap, admin endpoints the tests read)
// is checked on machines without an Envoy binary too.
func TestHarnessWithoutEnvoy(t *testing.T) {
	s := startSwarmgate(t)
	ctx := testCtx(t)

	data, err := os.ReadFile(s.bootstrapPath)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(j, &b); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	if err := translator.Validate(&b); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	if got := b.GetAdmin().GetAddress().GetSocketAddress().GetAddress(); got != "127.0.0.1" {
		t.Errorf("Envoy admin on %s", got)
	}

	if status, body, err := get(ctx, s.adminURL+"/healthz", ""); err != nil || status != http.StatusOK {
		t.Errorf("/healthz: %d %s %v", status, body, err)
	}
	// Ready once the rate-limit service has its first config over xDS,
	// a moment after start.
	eventually(ctx, t, "/readyz", func() (bool, string) {
		status, body, err := get(ctx, s.adminURL+"/readyz", "")
		return err == nil && status == http.StatusOK, fmt.Sprintf("%d %s %v", status, body, err)
	})
	u, err := s.usage(ctx, "team")
	if err != nil {
		t.Fatal(err)
	}
	if u.Total.Requests != 0 {
		t.Errorf("fresh ledger reports %+v", u.Total)
	}
}
