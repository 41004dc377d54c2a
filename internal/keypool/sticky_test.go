package keypool

import (
	"fmt"
	"testing"
	"time"
)

func TestStickySessions(t *testing.T) {
	cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, time.Second, 0, false),
		map[string][]key{"b": {{id: "a", weight: 2}, {id: "b", weight: 1}, {id: "c", weight: 1}}})
	p1 := newPools(t, cfg, Options{Clock: newFakeClock()})
	p2 := newPools(t, cfg, Options{Clock: newFakeClock()})

	owner := map[string]string{}
	count := map[string]int{}
	for i := range 2000 {
		s := fmt.Sprint("session-", i)
		l := pick(t, p1, "b", PickRequest{Sticky: s, Attempt: 1})
		l.Done(status(200))
		owner[s] = l.KeyID
		count[l.KeyID]++
	}
	// Weighted: a gets about half the sessions.
	if count["a"] < 900 || count["a"] > 1100 || count["b"] < 400 || count["c"] < 400 {
		t.Fatalf("sessions per key %v, want about 1000/500/500", count)
	}
	// Same key on every pick and on another replica without shared state.
	for s, k := range owner {
		for _, p := range []*Pools{p1, p2} {
			l := pick(t, p, "b", PickRequest{Sticky: s, Attempt: 1})
			l.Done(status(200))
			if l.KeyID != k {
				t.Fatalf("session %s moved %s -> %s", s, k, l.KeyID)
			}
		}
	}
	// Tripping a breaks only a's sessions.
	for range 3 {
		_ = p1.Report(t.Context(), "b", "a", "", status(429))
	}
	moved := 0
	for s, k := range owner {
		l := pick(t, p1, "b", PickRequest{Sticky: s, Attempt: 1})
		l.Done(status(200))
		switch {
		case k == "a" && l.KeyID == "a":
			t.Fatal("session stayed on an open key")
		case k != "a" && l.KeyID != k:
			t.Fatalf("session %s on healthy key %s moved to %s", s, k, l.KeyID)
		case k == "a":
			moved++
		}
	}
	if moved != count["a"] {
		t.Fatalf("moved %d sessions, want %d", moved, count["a"])
	}
}
