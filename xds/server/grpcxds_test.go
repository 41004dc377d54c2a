package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/xds" // registers the xds:/// resolver and balancers

	"github.com/swarmgate/swarmgate/internal/contract"
)

const grpcGroup = "grpc-test"

// grpcClient is a proxyless gRPC client configured only by our xDS server:
// grpc-go's xDS client is an independent implementation of the protocol
// (LDS api_listener → RDS → CDS → EDS), so what it does with our resources
// is what a real xDS consumer does.
func grpcClient(t *testing.T, xdsAddr string) testgrpc.TestServiceClient {
	t.Helper()
	bootstrap := fmt.Sprintf(`{"xds_servers":[{"server_uri":%q,"channel_creds":[{"type":"insecure"}],"server_features":["xds_v3"]}],"node":{"id":%q}}`, xdsAddr, grpcGroup)
	var rb resolver.Builder
	rb, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///swarmgate", grpc.WithResolvers(rb), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// call sends one RPC to a model alias's pool and returns the backend that
// answered.
func call(ctx context.Context, c testgrpc.TestServiceClient, model string) (string, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, contract.HeaderPool, contract.Pool{Alias: model}.Cluster())
	var md metadata.MD
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.EmptyCall(ctx, &testgrpc.Empty{}, grpc.Header(&md), grpc.WaitForReady(true)); err != nil {
		return "", err
	}
	if v := md.Get("backend"); len(v) > 0 {
		return v[0], nil
	}
	return "", errors.New("no backend header")
}

func count(t *testing.T, c testgrpc.TestServiceClient, model string, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for i := 0; i < n; i++ {
		b, err := call(context.Background(), c, model)
		if err != nil {
			t.Fatalf("rpc %d to %s: %v", i, model, err)
		}
		out[b]++
	}
	return out
}

// waitFor calls model until want answers n times in a row, bounded by d.
func waitFor(t *testing.T, c testgrpc.TestServiceClient, model, want string, n int, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	streak := 0
	for streak < n {
		b, err := call(ctx, c, model)
		if ctx.Err() != nil {
			t.Fatalf("%s: %s did not take all traffic within %v (last %q, err %v)", model, want, d, b, err)
		}
		if b == want {
			streak++
		} else {
			streak = 0
		}
	}
	return time.Since(start)
}

func TestGRPCClientConsumesGateway(t *testing.T) {
	a, b, c := startBackend(t, "a"), startBackend(t, "b"), startBackend(t, "c")
	dead := deadAddr(t)
	models := map[string][]string{
		"split":    {"a@" + a + ",80,0", "b@" + b + ",20,0"},
		"failover": {"dead@" + dead + ",1,0", "c@" + c + ",1,1"},
		"health":   {"a@" + a + ",1,0", "c@" + c + ",1,1"},
	}
	health := newTestHealth()
	cp := New(Options{GRPCNodeGroup: grpcGroup, Health: health})
	if err := cp.SetConfig(parseConfig(t, gatewayYAML(models))); err != nil {
		t.Fatal(err)
	}
	client := grpcClient(t, startControlPlane(t, cp))

	t.Run("weighted split", func(t *testing.T) {
		const n = 500
		got := count(t, client, "split", n)
		t.Logf("80/20 locality weights over %d RPCs: %v", n, got)
		if frac := float64(got["a"]) / n; frac < 0.72 || frac > 0.88 {
			t.Errorf("backend a got %.2f of traffic, want 0.80±0.08 (%v)", frac, got)
		}
	})
	t.Run("priority failover", func(t *testing.T) {
		got := count(t, client, "failover", 50)
		if got["c"] != 50 {
			t.Errorf("priority 0 is dead, priority 1 should take everything: %v", got)
		}
	})
	t.Run("unhealthy backend fails over by priority", func(t *testing.T) {
		if got := count(t, client, "health", 20); got["a"] != 20 {
			t.Fatalf("before: %v", got)
		}
		edsBefore := cp.Versions()[grpcGroup]
		health.set("a", false)
		took := waitFor(t, client, "health", "c", 20, 10*time.Second)
		t.Logf("traffic moved to priority 1 within %v of the health signal", took)
		after := cp.Versions()[grpcGroup]
		for typ, v := range edsBefore {
			changed := after[typ] != v
			if isEDS := typ == endpointType; changed != isEDS {
				t.Errorf("type %s changed=%v on a health update; want only EDS to change", typ, changed)
			}
		}
		health.set("a", true)
		waitFor(t, client, "health", "a", 20, 10*time.Second)
	})
	t.Run("live config edit takes effect", func(t *testing.T) {
		edited := map[string][]string{
			"split":    {"b@" + b + ",1,0"},
			"failover": models["failover"],
			"health":   models["health"],
		}
		if err := cp.SetConfig(parseConfig(t, gatewayYAML(edited))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, client, "split", "b", 30, 10*time.Second)
	})
	t.Run("bad edit does not take effect", func(t *testing.T) {
		before := cp.Versions()
		bad := parseConfig(t, gatewayYAML(models)+"envoy: {node_cluster: "+contract.NodeExtProc+"}\n")
		if err := cp.SetConfig(bad); !errors.Is(err, ErrReservedGroup) {
			t.Fatalf("SetConfig(bad) = %v, want ErrReservedGroup", err)
		}
		if got := count(t, client, "split", 30); got["b"] != 30 {
			t.Errorf("after a rejected edit traffic changed: %v", got)
		}
		if after := cp.Versions(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("versions changed after a rejected config:\n%v\n%v", before, after)
		}
		if got := testutilCounter(cp.metrics.rejected); got != 1 {
			t.Errorf("rejected configs metric = %v, want 1", got)
		}
	})
}
