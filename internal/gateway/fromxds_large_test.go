package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/porttest"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/xds/gatewayconfig"
)

// TestFromXDSReplicaReceivesLargeConfig: a GatewayConfig above grpc-go's
// default 4 MiB receive limit reaches an `extproc --from-xds` replica.
// Before, the replica's stream failed with ResourceExhausted on every
// attempt and it kept serving its bootstrap file's config.
func TestFromXDSReplicaReceivesLargeConfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs := redistest.Start(t)
	xdsL, epL, adminL, repL := listen(t), listen(t), listen(t), listen(t)
	base := fmt.Sprintf(gatewayYAML, xdsL.Addr(), epL.Addr(), porttest.Addr(t), adminL.Addr(), rs.Addr, "127.0.0.1:9",
		config.HashKey("sk-team"), "")
	var bulk strings.Builder
	bulk.WriteString("    limits: {rpm: 2}\n  - name: bulk\n    models: [\"*\"]\n    keys:\n")
	for i := range 30000 {
		fmt.Fprintf(&bulk, "      - {id: bulk-%05d, hash: \"sha256:%064x\"}\n", i, i+1)
	}
	dir := t.TempDir()
	cpPath, repPath := filepath.Join(dir, "gateway.yaml"), filepath.Join(dir, "replica.yaml")
	if err := os.WriteFile(cpPath, []byte(strings.Replace(base, "    limits: {rpm: 2}\n", bulk.String(), 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(repPath, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	serve, stop := startServe(t, ctx, cpPath, Listeners{XDS: xdsL, ExtProc: epL, Admin: adminL})
	defer stop()
	gc, err := gatewayconfig.FromConfig(serve.Config())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(gc.GetConfig()); n <= 4<<20 {
		t.Fatalf("the GatewayConfig is %d bytes: not above the 4 MiB default this test is about", n)
	}

	rep, err := New(Options{Roles: Roles{ExtProc: true}, FromXDS: true, ConfigPath: repPath, NodeID: "replica-1",
		Load: config.Options{LookupEnv: lookup}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Listeners: Listeners{ExtProc: repL}})
	if err != nil {
		t.Fatal(err)
	}
	repCtx, repCancel := context.WithCancel(ctx)
	repDone := make(chan error, 1)
	go func() { repDone <- rep.Run(repCtx) }()
	defer func() {
		repCancel()
		if err := <-repDone; err != nil {
			t.Errorf("replica Run: %v", err)
		}
	}()
	wait, cancelWait := context.WithTimeout(ctx, 30*time.Second)
	defer cancelWait()
	eventually(t, wait, "the replica runs the control plane's config", func() bool {
		c := rep.Config()
		if c == nil {
			return false
		}
		b, ok := c.Tenant("bulk")
		return ok && len(b.Keys) == 30000
	})
}
