// Package gatewaytest runs a whole swarmgate in a test's process, as
// `swarmgate serve` would, and writes the Envoy bootstrap its control
// plane serves: the start-up the end-to-end suites (test/e2e-envoy,
// test/swarm) share.
package gatewaytest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/gateway"
	"github.com/swarmgate/swarmgate/xds/bootstrap"
)

// Bounds on start and stop: far above what either takes on a loaded
// 2-core machine; they only turn a hang into a test failure.
const (
	readyWithin = 60 * time.Second
	stopWithin  = 30 * time.Second
)

// Gateway is one in-process gateway started by Start.
type Gateway struct {
	cancel context.CancelFunc
	done   chan error
}

// Start runs gateway.New(opts) until Stop or the end of the test, and
// returns once it is ready (opts.Ready is set here); the test fails when
// the gateway cannot be built, stops first or is not ready in time.
func Start(t testing.TB, opts gateway.Options) *Gateway {
	t.Helper()
	ready := make(chan struct{})
	opts.Ready = ready
	gw, err := gateway.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &Gateway{cancel: cancel, done: make(chan error, 1)}
	go func() { g.done <- gw.Run(ctx) }()
	t.Cleanup(func() { g.Stop(t) })
	select {
	case <-ready:
	case err := <-g.done:
		g.cancel = nil
		cancel()
		t.Fatalf("gateway %s stopped before it was ready: %v", opts.NodeID, err)
	case <-time.After(readyWithin):
		t.Fatalf("gateway %s not ready within %s", opts.NodeID, readyWithin)
	}
	return g
}

// Stop ends the gateway and waits for Run to return; the test fails when
// Run returns an error or does not return in time. Stopping twice is a
// no-op.
func (g *Gateway) Stop(t testing.TB) {
	t.Helper()
	if g.cancel == nil {
		return
	}
	g.cancel()
	g.cancel = nil
	select {
	case err := <-g.done:
		if err != nil {
			t.Errorf("gateway.Run: %v", err)
		}
	case <-time.After(stopWithin):
		t.Errorf("gateway did not stop within %s", stopWithin)
	}
}

// WriteBootstrap writes the Envoy bootstrap for cfg (node id node, admin
// listener on adminAddr) to a file in the test's temporary directory and
// returns its path.
func WriteBootstrap(t testing.TB, cfg *config.Config, node, adminAddr string) string {
	t.Helper()
	b, err := bootstrap.Build(cfg, node, bootstrap.Options{AdminAddress: adminAddr})
	if err != nil {
		t.Fatal(err)
	}
	yb, err := bootstrap.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, yb, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Logger is a text logger at level whose lines go to the test's log until
// the test's cleanups run; a line logged later (a timer of a component that
// outlives the test) is dropped, as testing forbids logging after a test
// ends.
func Logger(t testing.TB, level slog.Level) *slog.Logger {
	w := &testLog{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.closed = true
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testLog struct {
	t      testing.TB
	mu     sync.Mutex
	closed bool
}

func (w *testLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
