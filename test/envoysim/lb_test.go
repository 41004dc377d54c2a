package envoysim

import (
	"slices"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

func pct(v float64) *float64 { return &v }

// Behaviour 2: priority load and panic (load_balancer_impl.cc
// recalculatePerPriorityState / recalculatePerPriorityPanic, v1.38.0).
func TestPriorityLoadAndPanic(t *testing.T) {
	eps := func(prio int, healthy, unhealthy int) []Endpoint {
		var out []Endpoint
		for i := range healthy + unhealthy {
			out = append(out, Endpoint{Address: "h", Priority: prio, Unhealthy: i >= healthy})
		}
		return out
	}
	tests := []struct {
		name      string
		c         Cluster
		wantLoad  []int
		wantPanic []bool
	}{
		{"80% healthy P0 keeps all load (×1.4 caps at 100)", Cluster{Endpoints: append(eps(0, 4, 1), eps(1, 1, 0)...)}, []int{100, 0}, []bool{false, false}},
		{"50% healthy P0 spills 30% to P1", Cluster{Endpoints: append(eps(0, 1, 1), eps(1, 2, 0)...)}, []int{70, 30}, []bool{false, false}},
		{"no panic while the normalized total is 100", Cluster{Endpoints: append(eps(0, 1, 3), eps(1, 1, 1)...)}, []int{35, 65}, []bool{false, false}},
		{"P0 below the threshold is in panic", Cluster{Endpoints: append(eps(0, 1, 4), eps(1, 1, 1)...)}, []int{29, 71}, []bool{true, false}},
		{"all dead, default threshold: total panic by host count", Cluster{Endpoints: append(eps(0, 0, 1), eps(1, 0, 3)...)}, []int{25, 75}, []bool{true, true}},
		{"all dead, threshold 0: 100% to P0, no panic", Cluster{HealthyPanicThreshold: pct(0), Endpoints: append(eps(0, 0, 1), eps(1, 0, 1)...)}, []int{100, 0}, []bool{false, false}},
		{"overprovisioning 100", Cluster{OverprovisioningFactor: 100, Endpoints: append(eps(0, 4, 1), eps(1, 1, 0)...)}, []int{80, 20}, []bool{false, false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ps := computePriorities(&tc.c)
			if !slices.Equal(ps.load, tc.wantLoad) || !slices.Equal(ps.panic, tc.wantPanic) {
				t.Errorf("load %v panic %v, want %v %v", ps.load, ps.panic, tc.wantLoad, tc.wantPanic)
			}
		})
	}
}

// Behaviour 2 end to end: a priority in panic routes to its unhealthy
// hosts; with healthy_panic_threshold 0 the same cluster answers 503 "no
// healthy upstream"; previous_priorities moves a retry to P1.
func TestPanicRoutingAndPreviousPriorities(t *testing.T) {
	_, addr := startScript(t, func(_ string, _ int, req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
		return one(pass(req))
	})
	dead := newUpstream(t, func(int) int { return 200 })
	t.Run("panic routes to the unhealthy host", func(t *testing.T) {
		s := startSim(t, Config{Routes: []Route{{Name: "r", Cluster: "c"}}, Clusters: []Cluster{{Name: "c",
			Endpoints: []Endpoint{{Address: dead.addr(), Unhealthy: true}}}}})
		if resp, _ := do(t, s, nil, ""); resp.StatusCode != 200 || s.Stats().LbHealthyPanic == 0 {
			t.Errorf("status %d stats %+v", resp.StatusCode, s.Stats())
		}
	})
	t.Run("threshold 0: no healthy upstream", func(t *testing.T) {
		s := startSim(t, Config{Routes: []Route{{Name: "r", Cluster: "c"}}, RouterFilter: routerFilter(addr), Clusters: []Cluster{{Name: "c",
			HealthyPanicThreshold: pct(0), Endpoints: []Endpoint{{Address: dead.addr(), Unhealthy: true}}}}})
		resp, body := do(t, s, nil, "")
		if resp.StatusCode != 503 || body != "no healthy upstream" {
			t.Errorf("status %d body %q", resp.StatusCode, body)
		}
	})
	t.Run("previous_priorities", func(t *testing.T) {
		p0 := newUpstream(t, func(int) int { return 503 })
		p1 := newUpstream(t, func(int) int { return 200 })
		rp := &RetryPolicy{RetryOn: []string{"5xx"}, NumRetries: 1, BackoffBase: time.Millisecond, PreviousPriorities: true}
		s := startSim(t, Config{Routes: []Route{{Name: "r", Cluster: "c", Retry: rp}}, Clusters: []Cluster{{Name: "c",
			Endpoints: []Endpoint{{Address: p0.addr()}, {Address: p1.addr(), Priority: 1}}}}})
		resp, _ := do(t, s, map[string]string{"x-request-id": "pp"}, "")
		rec := waitRecord(t, s, "pp")
		if resp.StatusCode != 200 || len(rec.Attempts) != 2 || rec.Attempts[1].Priority != 1 {
			t.Errorf("status %d attempts %+v", resp.StatusCode, rec.Attempts)
		}
	})
}
