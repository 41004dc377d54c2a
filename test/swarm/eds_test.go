package swarm

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swarmgate/swarmgate/test/envoysim"
)

// edsFeed subscribes to the control plane's EDS over a real SotW ADS stream
// (go-control-plane's client) as an Envoy node of the gateway group, and
// applies every pushed ClusterLoadAssignment's endpoint health and weights
// to the sim, as Envoy's EDS would. envoysim has no xDS client of its own.
type edsFeed struct {
	mu      sync.Mutex
	updates []edsUpdate
	notify  chan struct{}
}

type edsUpdate struct {
	At        time.Time
	Unhealthy map[string]bool // endpoint address -> unhealthy (any cluster)
	Weights   []string        // cluster/zone=weight of each endpoint pushed
}

func startEDSFeed(t *testing.T, ctx context.Context, xdsAddr, nodeCluster string, sim *envoysim.Sim) *edsFeed {
	t.Helper()
	cc, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c := sotw.NewADSClient(ctx, &corev3.Node{Id: "envoysim", Cluster: nodeCluster}, resource.EndpointType)
	if err := c.InitConnect(cc); err != nil {
		t.Fatal(err)
	}
	f := &edsFeed{notify: make(chan struct{}, 1)}
	done := make(chan struct{})
	// Closing the connection ends Fetch; then the loop is gone.
	t.Cleanup(func() { _ = cc.Close(); <-done })
	// A backend with no usable key keeps its locality with no endpoints:
	// the addresses it had before are then unhealthy.
	seen := map[string][]string{} // cluster/zone -> addresses
	go func() {
		defer close(done)
		for {
			r, err := c.Fetch()
			if err != nil {
				return // ctx ended (test over)
			}
			up := edsUpdate{At: time.Now(), Unhealthy: map[string]bool{}}
			for _, a := range r.Resources {
				var cla endpointv3.ClusterLoadAssignment
				if err := a.UnmarshalTo(&cla); err != nil {
					_ = c.Nack(err.Error())
					continue
				}
				for _, le := range cla.GetEndpoints() {
					loc := cla.GetClusterName() + "/" + le.GetLocality().GetZone()
					if len(le.GetLbEndpoints()) == 0 {
						for _, addr := range seen[loc] {
							sim.SetHealthy(cla.GetClusterName(), addr, false)
							up.Unhealthy[addr] = true
						}
						continue
					}
					seen[loc] = seen[loc][:0]
					lw := uint32(1)
					if w := le.GetLoadBalancingWeight(); w != nil {
						lw = w.GetValue()
					}
					for _, e := range le.GetLbEndpoints() {
						sa := e.GetEndpoint().GetAddress().GetSocketAddress()
						addr := net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))
						seen[loc] = append(seen[loc], addr)
						ew := uint32(1)
						if w := e.GetLoadBalancingWeight(); w != nil {
							ew = w.GetValue()
						}
						sim.SetWeight(cla.GetClusterName(), addr, int(lw*ew))
						up.Weights = append(up.Weights, fmt.Sprintf("%s/%s=%d", cla.GetClusterName(), le.GetLocality().GetZone(), lw*ew))
						// Envoy routes to HEALTHY and UNKNOWN hosts only
						// (api-v3/config/core/v3/health_check.proto#enum-config-core-v3-healthstatus).
						h := e.GetHealthStatus()
						bad := h == corev3.HealthStatus_UNHEALTHY || h == corev3.HealthStatus_DRAINING || h == corev3.HealthStatus_TIMEOUT
						sim.SetHealthy(cla.GetClusterName(), addr, !bad)
						up.Unhealthy[addr] = up.Unhealthy[addr] || bad
					}
				}
			}
			_ = c.Ack()
			slices.Sort(up.Weights)
			f.mu.Lock()
			f.updates = append(f.updates, up)
			f.mu.Unlock()
			select {
			case f.notify <- struct{}{}:
			default:
			}
		}
	}()
	return f
}

// waitHealth waits for the first update after the since-th one that shows
// addr with the given health, and returns when it arrived (false when none
// came within the wait).
func (f *edsFeed) waitHealth(since int, addr string, unhealthy bool, within time.Duration) (time.Time, bool) {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		for _, u := range f.updates[min(since, len(f.updates)):] {
			if bad, ok := u.Unhealthy[addr]; ok && bad == unhealthy {
				f.mu.Unlock()
				return u.At, true
			}
		}
		f.mu.Unlock()
		select {
		case <-f.notify:
		case <-deadline.C:
			return time.Time{}, false
		}
	}
}

// weights lists the endpoint weights of every update so far that changed
// one, in order (cluster/zone=weight).
func (f *edsFeed) weights() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out [][]string
	var last []string
	for _, u := range f.updates {
		if !slices.Equal(u.Weights, last) {
			out = append(out, u.Weights)
			last = u.Weights
		}
	}
	return out
}

// pushes is how many EDS responses arrived so far.
func (f *edsFeed) pushes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.updates)
}
