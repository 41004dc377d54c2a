package translator

import (
	"slices"
	"testing"

	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/xds/ir"
)

type caps = map[string]contract.Capacity

// c is a capacity of a attempts per minute, r of them refused.
func c(a, r float64) contract.Capacity { return contract.Capacity{Attempts: a, Refused: r} }

func TestCapacityWeights(t *testing.T) {
	targets := []ir.Target{
		{Backend: "a", Weight: 1},
		{Backend: "b", Weight: 1},
		{Backend: "c", Weight: 3, Priority: 1},
		{Backend: "d", Weight: 1, Priority: 1},
	}
	for _, tc := range []struct {
		name     string
		capacity map[string]contract.Capacity
		want     []uint32
	}{
		{"nothing learned: configured", nil, []uint32{1, 1, 3, 1}},
		{"equal weights: the capacities' split", caps{"a": c(330, 0), "b": c(210, 0)}, []uint32{611, 389, 3, 1}},
		// b's keys take 300 attempts a minute, 90 of them refused and
		// retried on a: a's first attempts are its 330 less those 90.
		{"refusals retried on the other host", caps{"a": c(330, 0), "b": c(300, 90)}, []uint32{444, 556, 3, 1}},
		{"configured weights tilt it", caps{"c": c(100, 0), "d": c(100, 0)}, []uint32{1, 1, 750, 250}},
		{"one unknown in a priority: configured there", caps{"a": c(330, 0), "c": c(100, 0), "d": c(100, 0)}, []uint32{1, 1, 750, 250}},
		{"a tiny share stays at least 1", caps{"a": c(1, 0), "b": c(1000000, 0)}, []uint32{1, 1000, 3, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := capacityWeights(targets, tc.capacity); !slices.Equal(got, tc.want) {
				t.Errorf("weights %v, want %v", got, tc.want)
			}
		})
	}
	// A priority with one target keeps its configured weight (its
	// locality weight moves nothing).
	one := []ir.Target{{Backend: "a", Weight: 2}, {Backend: "b", Weight: 1, Priority: 1}}
	if got := capacityWeights(one, caps{"a": c(5, 0), "b": c(7, 0)}); !slices.Equal(got, []uint32{2, 1}) {
		t.Errorf("single targets: %v", got)
	}
}

// TestPoolEndpointsFollowCapacity: the assignment carries the capacity
// weights as locality weights.
func TestPoolEndpointsFollowCapacity(t *testing.T) {
	p := &ir.Pool{Cluster: "pool_m", Targets: []ir.Target{
		{Backend: "a", Weight: 1, Host: "10.0.0.1", Port: 80},
		{Backend: "b", Weight: 1, Host: "10.0.0.2", Port: 80},
	}}
	cla := PoolEndpoints(p, EndpointState{Capacity: caps{"a": c(330, 0), "b": c(210, 0)}})
	var got []uint32
	for _, l := range cla.Endpoints {
		got = append(got, l.GetLoadBalancingWeight().GetValue())
	}
	if !slices.Equal(got, []uint32{611, 389}) {
		t.Fatalf("locality weights %v, want [611 389]", got)
	}
}
