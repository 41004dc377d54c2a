package keypool

import (
	"maps"
	"math"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// TestBackendCapacity: a backend's capacity is the sum of its keys' limits
// once every key's is known (configured or stated; a shorter window's at its
// rate per minute); learning one signals Changes on the replica that saw the
// answer and on the others when they adopt it, and so does a key's refused
// share, which a replica that never heard from the key adopts through Redis;
// without capacity_weights or
// with the pace off nothing is reported.
func TestBackendCapacity(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, 20*time.Millisecond, 0, true)+
		"redis: {read_timeout: 200ms, dial_timeout: 200ms}\nadmission: {capacity_weights: true}\n",
		map[string][]key{"x": {{id: "a", rpm: 600}, {id: "b"}}, "y": {{id: "c", rpm: 60}}})
	ps := replicas(t, srv, cfg, 2)
	if got := ps[0].BackendCapacity(); !maps.Equal(got, map[string]contract.Capacity{"y": {Attempts: 60}}) {
		t.Fatalf("before any answer: %v, want only y (x's key b has no known limit)", got)
	}
	signalled(ps[0]) // Changes holds one signal
	signalled(ps[1])
	// Key b states 15 requests per 10 s window: 90 per minute.
	o := ParseOutcome(200, func(n string) string {
		return map[string]string{"x-ratelimit-limit-requests": "15", "x-ratelimit-remaining-requests": "7",
			"x-ratelimit-reset-requests": "10s"}[n]
	})
	if err := ps[0].Report(t.Context(), "x", "b", "", o); err != nil {
		t.Fatal(err)
	}
	if !signalled(ps[0]) {
		t.Fatal("learning a limit did not signal Changes")
	}
	got := ps[0].BackendCapacity()
	if want := map[string]contract.Capacity{"x": {Attempts: 600 + 90}, "y": {Attempts: 60}}; !maps.Equal(got, want) {
		t.Fatalf("after b stated its limit: %v, want %v", got, want)
	}
	waitFor(t, 2*time.Second, "the other replica adopting the limit", func() bool {
		return maps.Equal(ps[1].BackendCapacity(), got)
	})
	if !signalled(ps[1]) {
		t.Fatal("adopting a limit did not signal Changes")
	}

	// Key c refuses part of its requests (429, Retry-After: 1, requests
	// left in its window): it takes more attempts, the extra refused.
	signalled(ps[0])
	refusal := ParseOutcome(429, func(n string) string {
		return map[string]string{"retry-after": "1", "x-ratelimit-limit-requests": "60",
			"x-ratelimit-remaining-requests": "30", "x-ratelimit-reset-requests": "30s"}[n]
	})
	for range 10 {
		if err := ps[0].Report(t.Context(), "y", "c", "", refusal); err != nil {
			t.Fatal(err)
		}
	}
	if !signalled(ps[0]) {
		t.Fatal("a key refusing part of its requests did not signal Changes")
	}
	y := ps[0].BackendCapacity()["y"]
	if y.Attempts <= 60 || y.Refused <= 0 || y.Refused >= y.Attempts {
		t.Fatalf("y after ten short refusals: %+v, want more attempts than its 60, part of them refused", y)
	}
	t.Logf("y after ten short refusals: %+v", y)
	// The other replica never heard from c (a control plane beside
	// ext_proc replicas): it adopts the refused share through Redis, as it
	// stood when it last moved by more than capacityStep.
	waitFor(t, 2*time.Second, "the other replica adopting c's refused share", func() bool {
		o := ps[1].BackendCapacity()["y"]
		// Within capacityStep: a share is written when it moves by more.
		return o.Refused > 0 && math.Abs(o.Attempts-y.Attempts) <= capacityStep*y.Attempts &&
			math.Abs(o.Refused-y.Refused) <= capacityStep*y.Attempts
	})
	if !signalled(ps[1]) {
		t.Fatal("adopting a refused share did not signal Changes")
	}
	if got := ps[0].BackendCapacity()["y"]; got != y {
		t.Fatalf("the replica that heard from c took the shared share over its own: %+v, want %+v", got, y)
	}

	for _, adm := range []string{"{pace: false, capacity_weights: true}", "{pace: true}"} {
		off := newPools(t, testConfig(t, "admission: "+adm+"\n", map[string][]key{"y": {{id: "c", rpm: 60}}}), Options{})
		if got := off.BackendCapacity(); got != nil {
			t.Fatalf("admission %s: %v, want nil", adm, got)
		}
	}
}

// signalled reports whether p's Changes has fired since it was last read.
func signalled(p *Pools) bool {
	select {
	case <-p.Changes():
		return true
	default:
		return false
	}
}
