// Package rlstest starts the real pieces of the rate-limit path for tests:
// a go-control-plane xDS server serving RateLimitConfig to the rate-limit
// service's node, and the embedded envoyproxy/ratelimit service on a free
// loopback port with its counters in a real redis-server (internal/redistest).
package rlstest

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/ratelimit/service"
)

// XDS is an xDS server holding one RateLimitConfig snapshot for the node
// group contract.NodeRateLimit.
type XDS struct {
	Addr    string
	cache   cachev3.SnapshotCache
	version atomic.Int64
}

// StartXDS serves xDS on a free loopback port until the test ends.
func StartXDS(t testing.TB) *XDS {
	t.Helper()
	x := &XDS{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("xDS listen: %v", err)
	}
	x.Addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	srv := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(srv, serverv3.NewServer(ctx, x.cache, nil))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { cancel(); srv.Stop() })
	return x
}

// Set publishes cfgs as a new snapshot version.
func (x *XDS) Set(t testing.TB, cfgs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	v := strconv.FormatInt(x.version.Add(1), 10)
	snap, err := cachev3.NewSnapshot(v, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if err := x.cache.SetSnapshot(context.Background(), contract.NodeRateLimit, snap); err != nil {
		t.Fatalf("set snapshot: %v", err)
	}
}

// Config parses a gateway config and points it at the test's Redis and
// xDS server, with the rate-limit service on a free port.
func Config(t testing.TB, yaml, redisAddr, xdsAddr string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), t.Name()+".yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	cfg.Listen.RateLimit = "127.0.0.1:0"
	cfg.Envoy.XDSAddress = xdsAddr
	cfg.Redis.Addrs = []string{redisAddr}
	return cfg
}

// Running is a started Service.
type Running struct {
	*service.Service
	Addr string
	stop func() error
}

// Stop cancels Run and returns its result (bounded by a deadline).
func (r *Running) Stop() error { return r.stop() }

// StartService runs the embedded service until the test ends and waits,
// at most 10 s, until it has loaded its first config.
func StartService(t testing.TB, cfg *config.Config, opts service.Options) *Running {
	t.Helper()
	svc, err := service.New(cfg, opts)
	if err != nil {
		t.Fatalf("service.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	wait := time.NewTimer(10 * time.Second)
	defer wait.Stop()
	select {
	case <-svc.ConfigLoaded():
	case err := <-done:
		cancel()
		t.Fatalf("service.Run returned before loading config: %v", err)
	case <-wait.C:
		cancel()
		t.Fatalf("service did not load its config within 10s")
	}
	var stopped atomic.Bool
	var result error
	stop := func() error {
		if stopped.Swap(true) {
			return result
		}
		cancel()
		select {
		case result = <-done:
		case <-time.After(10 * time.Second):
			result = errors.New("service.Run did not return within 10s of cancel")
		}
		return result
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stopping rate-limit service: %v", err)
		}
	})
	addr := svc.Addr()
	if addr == nil {
		t.Fatal("rate-limit service loaded its config but reports no listening address")
	}
	return &Running{Service: svc, Addr: addr.String(), stop: stop}
}

// Dial returns a client connection to addr, closed when the test ends.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// AvoidWindowEdge makes sure at least need remains in the current fixed
// minute window (envoyproxy/ratelimit windows are aligned to the Unix
// minute), sleeping into the next window when it is closer than that, so a
// test counting in one window is not split across two.
func AvoidWindowEdge(t testing.TB, need time.Duration) {
	t.Helper()
	if need > 30*time.Second {
		t.Fatalf("AvoidWindowEdge: need %v is more than half a window", need)
	}
	now := time.Now()
	next := now.Truncate(time.Minute).Add(time.Minute)
	if left := next.Sub(now); left < need {
		t.Logf("waiting %v for a fresh rate-limit window", left.Round(time.Millisecond))
		time.Sleep(left + 10*time.Millisecond)
	}
}
