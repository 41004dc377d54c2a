package server

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

func TestMergeAddrs(t *testing.T) {
	for _, tc := range []struct {
		name          string
		names         []string
		pass, current map[string][]string
		want          map[string][]string
	}{
		{"pass answers", []string{"a"}, map[string][]string{"a": {"10.0.0.2"}}, map[string][]string{"a": {"10.0.0.1"}},
			map[string][]string{"a": {"10.0.0.2"}}},
		{"name added during the pass keeps SetConfig's answer", []string{"a", "b"}, map[string][]string{"a": {"10.0.0.2"}},
			map[string][]string{"a": {"10.0.0.1"}, "b": {"10.0.1.1"}},
			map[string][]string{"a": {"10.0.0.2"}, "b": {"10.0.1.1"}}},
		{"name removed during the pass is dropped", []string{"b"}, map[string][]string{"a": {"10.0.0.2"}},
			map[string][]string{"b": {"10.0.1.1"}},
			map[string][]string{"b": {"10.0.1.1"}}},
		{"never resolved stays absent", []string{"a"}, map[string][]string{}, map[string][]string{},
			map[string][]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mergeAddrs(tc.names, tc.pass, tc.current); !equalAddrs(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// gatedResolver answers from a table; the lookup a gate matches waits
// until the test releases it.
type gatedResolver struct {
	mu    sync.Mutex
	addrs map[string][]string
	gates []*gate
}

type gate struct {
	host    string        // "" matches any
	held    chan struct{} // closed when the lookup reaches the gate
	release chan struct{}
}

// hold makes the next lookup of host (any host when "") wait for release.
func (r *gatedResolver) hold(host string) *gate {
	g := &gate{host: host, held: make(chan struct{}), release: make(chan struct{})}
	r.mu.Lock()
	r.gates = append(r.gates, g)
	r.mu.Unlock()
	return g
}

func (r *gatedResolver) LookupHost(ctx context.Context, host string) ([]string, error) {
	r.mu.Lock()
	var g *gate
	if len(r.gates) > 0 && (r.gates[0].host == "" || r.gates[0].host == host) {
		g, r.gates = r.gates[0], r.gates[1:]
	}
	ips := slices.Clone(r.addrs[host])
	r.mu.Unlock()
	if g != nil {
		close(g.held)
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return ips, nil
}

// TestResolvePassKeepsConcurrentNames: a backend host name that SetConfig
// adds (and resolves) while a DNS pass is resolving the old names keeps its
// endpoint when that pass finishes.
func TestResolvePassKeepsConcurrentNames(t *testing.T) {
	r := &gatedResolver{addrs: map[string][]string{"old.test": {"10.0.0.1"}, "new.test": {"10.0.0.2"}}}
	cp := New(Options{Resolver: r, ResolveInterval: 10 * time.Millisecond, ResolveTimeout: time.Minute})
	models := map[string][]string{"m1": {"a@old.test:9001,1,0"}}
	if err := cp.SetConfig(parseConfig(t, gatewayYAML(models))); err != nil {
		t.Fatal(err)
	}
	pass := r.hold("old.test")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); cp.resolveLoop(ctx) }()
	defer func() { <-done }()
	defer cancel()

	<-pass.held // the pass has taken the old names
	models["m2"] = []string{"b@new.test:9002,1,0"}
	if err := cp.SetConfig(parseConfig(t, gatewayYAML(models))); err != nil {
		t.Fatal(err)
	}
	if n := poolEndpoints(t, cp, "pool_m2"); n != 1 {
		t.Fatalf("after SetConfig pool_m2 has %d endpoints, want 1", n)
	}
	next := r.hold("") // the loop's next lookup: the pass has been written back
	defer close(next.release)
	close(pass.release)
	select {
	case <-next.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the DNS loop did not come round again")
	}
	cp.mu.Lock()
	addrs := maps.Clone(cp.state.Addrs)
	cp.mu.Unlock()
	if want := map[string][]string{"old.test": {"10.0.0.1"}, "new.test": {"10.0.0.2"}}; !equalAddrs(addrs, want) {
		t.Errorf("addresses after the pass %v, want %v", addrs, want)
	}
	if n := poolEndpoints(t, cp, "pool_m2"); n != 1 {
		t.Errorf("after the DNS pass pool_m2 has %d endpoints, want 1", n)
	}
}

// poolEndpoints counts the endpoints of a pool's current assignment.
func poolEndpoints(t *testing.T, cp *ControlPlane, cluster string) int {
	t.Helper()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	r, ok := cp.snaps[cp.envoyGroup].types[resource.EndpointType].items[cluster]
	if !ok {
		t.Fatalf("no assignment for %s", cluster)
	}
	n := 0
	for _, loc := range r.Resource.(*endpointv3.ClusterLoadAssignment).GetEndpoints() {
		n += len(loc.GetLbEndpoints())
	}
	return n
}
