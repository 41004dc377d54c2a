// Package e2e runs the rate-limit service against swarmgate's own control
// plane (xds/server): the RateLimitConfig reaches the service through the
// node group contract.NodeRateLimit, and config changes follow.
package e2e

import (
	"context"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/ratelimit/keylimit"
	"github.com/swarmgate/swarmgate/ratelimit/rlstest"
	"github.com/swarmgate/swarmgate/ratelimit/service"
	xdsserver "github.com/swarmgate/swarmgate/xds/server"
)

func TestMain(m *testing.M) {
	service.RouteLibraryLogs(slog.New(slog.DiscardHandler))
	os.Exit(m.Run())
}

func TestConfigFromOurControlPlane(t *testing.T) {
	rs := redistest.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := rlstest.Config(t, rlstest.GatewayYAML, rs.Addr, ln.Addr().String())
	cp := xdsserver.New(xdsserver.Options{})
	if err := cp.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cpDone := make(chan error, 1)
	go func() { cpDone <- cp.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-cpDone:
		case <-time.After(10 * time.Second):
			t.Error("control plane did not stop")
		}
	})

	run := rlstest.StartService(t, cfg, service.Options{})
	rls := rlspb.NewRateLimitServiceClient(rlstest.Dial(t, run.Addr))
	limitOf := func() uint32 {
		c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		resp, err := rls.ShouldRateLimit(c, &rlspb.RateLimitRequest{Domain: cfg.Envoy.RateLimitDomain,
			Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{
				{Key: "key", Value: "k1"}, {Key: "limit", Value: "rpm"}}, HitsAddend: wrapperspb.UInt64(0)}}}) // look, do not charge
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if got := limitOf(); got != 60 {
		t.Fatalf("key k1 limit from the control plane: %d, want 60", got)
	}

	// A config change reaches the service; keylimit follows the same config.
	next := rlstest.Config(t, rlstest.GatewayYAML, rs.Addr, ln.Addr().String())
	next.Backends[0].Keys[0].RPM = 2
	if err := cp.SetConfig(next); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for limitOf() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("new key limit did not reach the service within 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	rlstest.AvoidWindowEdge(t, 3*time.Second)
	l := keylimit.New(rlstest.Dial(t, run.Addr), next, keylimit.Options{Timeout: 5 * time.Second})
	var allowed int
	for i := 0; i < 5; i++ {
		if ok, _, err := l.Allow(context.Background(), "k1", 0); err != nil {
			t.Fatal(err)
		} else if ok {
			allowed++
		}
	}
	if allowed != 2 {
		t.Errorf("allowed %d attempts on a 2 RPM key, want 2", allowed)
	}
}
