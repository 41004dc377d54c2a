package affinity

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// eventually polls until cond holds (records are written asynchronously).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestStoreRemembersAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Two replicas: one records, the other looks up.
	a := New(rs.Client(), Options{Prefix: "t:"})
	b := New(rs.Client(), Options{Prefix: "t:"})
	go func() { _ = a.Run(ctx) }()

	a.Remember("resp_1", Owner{Backend: "oai", Key: "oai-2", Tenant: "team"}, time.Hour)
	a.Remember("resp_short", Owner{Backend: "oai", Key: "oai-1", Tenant: "team"}, 200*time.Millisecond)
	eventually(t, "resp_1 recorded", func() bool { _, err := b.Owner(ctx, "resp_1"); return err == nil })

	for _, tc := range []struct {
		name, id string
		want     Owner
		err      error
	}{
		{"recorded", "resp_1", Owner{Backend: "oai", Key: "oai-2", Tenant: "team"}, nil},
		{"never seen", "resp_unknown", Owner{}, ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := b.Owner(ctx, tc.id)
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Fatalf("Owner(%q) = %+v, %v; want %+v, %v", tc.id, got, err, tc.want, tc.err)
			}
		})
	}
	eventually(t, "resp_short expired", func() bool { _, err := b.Owner(ctx, "resp_short"); return errors.Is(err, ErrNotFound) })
}

func TestStoreRedisDownIsNotNotFound(t *testing.T) {
	rs := redistest.Start(t)
	s := New(rs.Client(), Options{Prefix: "t:", ReadTimeout: 100 * time.Millisecond})
	rs.Stop()
	start := time.Now()
	_, err := s.Owner(context.Background(), "resp_1")
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("Redis down: err %v, want an error that is not ErrNotFound", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("lookup took %s with Redis down", d)
	}
}

func TestRememberNeverBlocks(t *testing.T) {
	rs := redistest.Start(t)
	s := New(rs.Client(), Options{Prefix: "t:", Queue: 2}) // no Run: the queue fills
	for range 5 {
		s.Remember("r", Owner{Backend: "b", Key: "k", Tenant: "t"}, time.Minute)
	}
	if s.Dropped() != 3 {
		t.Fatalf("dropped %d, want 3", s.Dropped())
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{{"oai\noai-1\nteam", true}, {"oai\noai-1", false}, {"oai", false}, {"\nk\nt", false}, {"b\n\nt", false}, {"b\nk\n", false}, {"", false}} {
		if _, ok := decode(tc.v); ok != tc.ok {
			t.Errorf("decode(%q) ok = %v, want %v", tc.v, ok, tc.ok)
		}
	}
}
