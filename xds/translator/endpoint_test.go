package translator

import (
	"slices"
	"testing"

	"github.com/swarmgate/swarmgate/xds/ir"
)

// TestPoolEndpointsHealth: an unhealthy backend's locality is emptied
// while another target of the pool (any priority) can take its requests;
// a pool with none healthy keeps every target, for its attempts' filter to
// answer (wait for a key, or refuse with Retry-After) instead of Envoy's
// "no healthy upstream".
func TestPoolEndpointsHealth(t *testing.T) {
	two := &ir.Pool{Cluster: "pool_m", Targets: []ir.Target{
		{Backend: "a", Weight: 1, Host: "10.0.0.1", Port: 80},
		{Backend: "b", Weight: 1, Host: "10.0.0.2", Port: 80, Priority: 1},
	}}
	one := &ir.Pool{Cluster: "pool_n", Targets: []ir.Target{{Backend: "a", Weight: 1, Host: "10.0.0.1", Port: 80}}}
	for _, tc := range []struct {
		name      string
		pool      *ir.Pool
		unhealthy map[string]bool
		want      []int // endpoints per locality
	}{
		{"all healthy", two, nil, []int{1, 1}},
		{"the first down: fails over", two, map[string]bool{"a": true}, []int{0, 1}},
		{"the second down", two, map[string]bool{"b": true}, []int{1, 0}},
		{"both down: both kept", two, map[string]bool{"a": true, "b": true}, []int{1, 1}},
		{"a single target down: kept", one, map[string]bool{"a": true}, []int{1}},
		{"another pool's backend down", one, map[string]bool{"b": true}, []int{1}},
	} {
		cla := PoolEndpoints(tc.pool, EndpointState{Unhealthy: tc.unhealthy})
		var got []int
		for _, l := range cla.Endpoints {
			got = append(got, len(l.LbEndpoints))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: endpoints per locality %v, want %v", tc.name, got, tc.want)
		}
	}
}
