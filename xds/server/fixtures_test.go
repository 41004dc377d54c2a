package server

import (
	"context"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/porttest"
)

// parseConfig parses a YAML config (secrets unresolved: the control plane
// never needs their values).
func parseConfig(t testing.TB, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), "test.yaml", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// startControlPlane serves cp on a free loopback port until the test ends.
func startControlPlane(t testing.TB, cp *ControlPlane) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return lis.Addr().String()
}

// grpcBackend is a gRPC test server that names itself in a response header.
type grpcBackend struct {
	testgrpc.UnimplementedTestServiceServer
	id string
}

func (b *grpcBackend) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs("backend", b.id))
	return &testgrpc.Empty{}, nil
}

func startBackend(t testing.TB, id string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, &grpcBackend{id: id})
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t testing.TB) string {
	t.Helper()
	return porttest.Addr(t)
}

// testHealth is a HealthSource whose answers the test sets.
type testHealth struct {
	mu       sync.Mutex
	health   map[string]bool
	capacity map[string]contract.Capacity
	changes  chan struct{}
	sent     chan time.Time // when each change was signalled
}

func newTestHealth() *testHealth {
	return &testHealth{health: map[string]bool{}, changes: make(chan struct{}, 1), sent: make(chan time.Time, 16)}
}

func (h *testHealth) BackendHealth() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.health)
}

func (h *testHealth) Changes() <-chan struct{} { return h.changes }

func (h *testHealth) BackendCapacity() map[string]contract.Capacity {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.capacity)
}

// setCapacity sets a backend's capacity and signals.
func (h *testHealth) setCapacity(backend string, c contract.Capacity) {
	h.mu.Lock()
	if h.capacity == nil {
		h.capacity = map[string]contract.Capacity{}
	}
	h.capacity[backend] = c
	h.mu.Unlock()
	select {
	case h.changes <- struct{}{}:
	default:
	}
}

func (h *testHealth) set(backend string, ok bool) time.Time {
	h.mu.Lock()
	h.health[backend] = ok
	h.mu.Unlock()
	now := time.Now()
	select {
	case h.changes <- struct{}{}:
	default:
	}
	return now
}

// gatewayYAML is a config whose backends are plaintext loopback servers.
// targets: model -> "backend@addr:weight:priority" entries.
func gatewayYAML(models map[string][]string) string {
	var b strings.Builder
	backends := map[string]string{}
	var mb strings.Builder
	for _, m := range sortedKeys(models) {
		fmt.Fprintf(&mb, "  - name: %s\n    targets:\n", m)
		for _, spec := range models[m] {
			var name, addr string
			var w, p int
			at := strings.Split(spec, "@")
			name = at[0]
			rest := strings.Split(at[1], ",")
			addr = rest[0]
			fmt.Sscanf(rest[1], "%d", &w)
			fmt.Sscanf(rest[2], "%d", &p)
			backends[name] = addr
			fmt.Fprintf(&mb, "      - {backend: %s, weight: %d, priority: %d}\n", name, w, p)
		}
	}
	b.WriteString("backends:\n")
	for _, name := range sortedKeys(backends) {
		fmt.Fprintf(&b, "  - name: %s\n    base_url: http://%s/v1\n    keys: [{id: %s-1, secret: env:KEY_%s}]\n", name, backends[name], name, strings.ToUpper(name))
	}
	b.WriteString("models:\n")
	b.WriteString(mb.String())
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}
