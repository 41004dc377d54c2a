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

// TestKeyAvailable: the one-key check a pinned request's admission makes.
// A key resting until its window resets is not available while the
// backend is (another key serves), and says when it is back; a key open for
// failures is failing; an unknown key or backend is failing.
func TestKeyAvailable(t *testing.T) {
	cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, time.Second, 0, true),
		map[string][]key{"b": {{id: "a"}, {id: "c"}}})
	p := newPools(t, cfg, Options{})
	if ok, _, _ := p.KeyAvailable("b", "a"); !ok {
		t.Fatal("a fresh key is not available")
	}
	if err := p.Report(context.Background(), "b", "a", "", restAnswer(200, "3s")); err != nil {
		t.Fatal(err)
	}
	ok, retry, failing := p.KeyAvailable("b", "a")
	if ok || failing || retry < 2*time.Second || retry > 3*time.Second {
		t.Fatalf("resting key: ok %v, retry %s, failing %v; want back within its 3 s reset, not failing", ok, retry, failing)
	}
	if ok, _ := p.Available([]string{"b"}); !ok {
		t.Fatal("the backend's other key does not serve")
	}
	for range 2 { // consecutive_5xx: 2
		if err := p.Report(context.Background(), "b", "c", "", status(500)); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _, failing := p.KeyAvailable("b", "c"); ok || !failing {
		t.Fatalf("key open for 5xx: ok %v, failing %v; want failing", ok, failing)
	}
	for _, tc := range [][2]string{{"b", "zz"}, {"nowhere", "a"}} {
		if ok, _, failing := p.KeyAvailable(tc[0], tc[1]); ok || !failing {
			t.Errorf("%v: ok %v, failing %v; want failing", tc, ok, failing)
		}
	}
}

// TestKeyAvailableFollowsEDS: like Available, a pinned key that has just
// reopened on a backend EDS has not been told is healthy again is not
// available until the push has had time to land (edsSettle).
func TestKeyAvailableFollowsEDS(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(t, breakerYAML(time.Minute, time.Hour, time.Second, 0, true),
		map[string][]key{"b": {{id: "a"}}})
	p := newPools(t, cfg, Options{Clock: clk})
	if err := p.Report(context.Background(), "b", "a", "", restAnswer(200, "3s")); err != nil {
		t.Fatal(err)
	}
	if ok, _ := p.Available([]string{"b"}); ok {
		t.Fatal("the backend's only key rests, yet the backend is available")
	}
	clk.Advance(3*time.Second + time.Millisecond)
	ok, retry, _ := p.KeyAvailable("b", "a")
	if ok || retry <= 0 || retry > edsSettle {
		t.Fatalf("key back, backend just healthy again: ok %v, retry %s; want a wait within %s", ok, retry, edsSettle)
	}
	if ok2, _ := p.Available([]string{"b"}); ok2 {
		t.Fatal("Available admits where KeyAvailable does not")
	}
	clk.Advance(edsSettle)
	if ok, _, _ := p.KeyAvailable("b", "a"); !ok {
		t.Fatal("key not available once EDS had time to settle")
	}
}
