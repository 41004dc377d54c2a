package keypool

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPickPinnedKey: a pinned pick gets that key or nothing, whatever
// BestEffort and LastResort allow for ordinary picks.
func TestPickPinnedKey(t *testing.T) {
	cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, time.Second, 0, false),
		map[string][]key{"b": {{id: "a", weight: 1}, {id: "c", weight: 1}}})
	p := newPools(t, cfg, Options{Clock: newFakeClock()})
	for i := range 4 {
		l := pick(t, p, "b", PickRequest{Key: "c", Attempt: 1, RequestID: "r" + string(rune('0'+i))})
		l.Done(status(200))
		if l.KeyID != "c" {
			t.Fatalf("pinned pick %d got %s", i, l.KeyID)
		}
	}
	// Open c: an ordinary pick falls back to a, a pinned one must not.
	for {
		l, err := p.Pick(context.Background(), "b", PickRequest{Key: "c", Attempt: 1})
		if err != nil {
			break
		}
		l.Done(status(429))
	}
	for _, tc := range []struct {
		name string
		req  PickRequest
	}{
		{"plain", PickRequest{Key: "c", Attempt: 1}},
		{"best effort", PickRequest{Key: "c", Attempt: 1, BestEffort: true}},
		{"last resort", PickRequest{Key: "c", Attempt: 1, BestEffort: true, LastResort: true}},
		{"unknown key", PickRequest{Key: "zz", Attempt: 1, BestEffort: true, LastResort: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := p.Pick(context.Background(), "b", tc.req)
			var ex *ExhaustedError
			if err == nil || !errors.As(err, &ex) {
				t.Fatalf("got key %q, err %v; want ExhaustedError", l.KeyID, err)
			}
		})
	}
	if l := pick(t, p, "b", PickRequest{Attempt: 1}); l.KeyID != "a" {
		t.Fatalf("unpinned pick got %s, want a", l.KeyID)
	}
}
