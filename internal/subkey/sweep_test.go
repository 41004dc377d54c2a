package subkey

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// TestSweepFinishedKeys: a full reload deletes the keys revoked or expired
// more than the retention ago, announces each (another replica's cache
// drops them), and keeps every other key, and a key changed since the
// reload read it. Without a retention nothing is deleted.
func TestSweepFinishedKeys(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := t.Context()
	log := slog.New(slog.DiscardHandler)
	const day = 24 * time.Hour
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	s := NewStore(rdb, "sg:subkey:", log)
	at := func(tm time.Time) { s.now = func() time.Time { return tm } }

	create := func(k Key) *Key {
		t.Helper()
		made, _, err := s.Create(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return made
	}
	at(now.Add(-40 * day))
	live := create(Key{Tenant: "demo"})
	oldRevoked := create(Key{Tenant: "demo"})
	if _, err := s.Revoke(ctx, oldRevoked.ID); err != nil {
		t.Fatal(err)
	}
	oldExpired := create(Key{Tenant: "demo", ExpiresAt: now.Add(-39 * day)})
	stillValid := create(Key{Tenant: "demo", ExpiresAt: now.Add(day)})
	at(now.Add(-2 * day))
	newRevoked := create(Key{Tenant: "demo"})
	if _, err := s.Revoke(ctx, newRevoked.ID); err != nil {
		t.Fatal(err)
	}
	newExpired := create(Key{Tenant: "demo", ExpiresAt: now.Add(-day)})
	// A minter revoked long ago and the keys it minted (no expiry of their
	// own, refused with it); a key a config minter minted, live.
	at(now.Add(-40 * day))
	minter := create(Key{Tenant: "demo"})
	workers := []*Key{create(Key{Tenant: "demo", Parent: minter.ID}), create(Key{Tenant: "demo", Parent: minter.ID})}
	if _, err := s.Revoke(ctx, minter.ID); err != nil {
		t.Fatal(err)
	}
	ofConfig := create(Key{Tenant: "demo", Parent: "team-planner"})
	at(now)

	ids := func() []string {
		t.Helper()
		got, err := rdb.HKeys(ctx, s.hashKey()).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	all := ids()

	// No retention: nothing goes.
	if err := s.resync(ctx, true); err != nil {
		t.Fatal(err)
	}
	if got := ids(); !slices.Equal(got, all) {
		t.Fatalf("without a retention the reload deleted keys: %v of %v", got, all)
	}

	// Another replica, to see the announcements.
	other := NewStore(redis.NewClient(&redis.Options{Addr: srv.Addr}), "sg:subkey:", log)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = other.Run(octx) }()
	<-other.Synced()
	if _, ok := other.Cached(oldRevoked.ID); !ok {
		t.Fatal("the other replica does not hold the keys")
	}

	s.SetRetention(30 * day)
	if err := s.resync(ctx, true); err != nil {
		t.Fatal(err)
	}
	want := []string{live.ID, stillValid.ID, newRevoked.ID, newExpired.ID, ofConfig.ID}
	slices.Sort(want)
	if got := ids(); !slices.Equal(got, want) {
		t.Fatalf("after the sweep the hash holds %v, want %v", got, want)
	}
	for _, id := range []string{oldRevoked.ID, oldExpired.ID, minter.ID, workers[0].ID, workers[1].ID} {
		if _, ok := s.Cached(id); ok {
			t.Errorf("deleted key %s still in this replica's cache", id)
		}
		deadline := time.Now().Add(3 * time.Second)
		for _, ok := other.Cached(id); ok; _, ok = other.Cached(id) {
			if time.Now().After(deadline) {
				t.Fatalf("deleted key %s still in the other replica's cache", id)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// A key changed after the reload read it is not deleted.
	raw, err := rdb.HGetAll(ctx, s.hashKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	keys := s.decodeAll(raw)
	keys[live.ID].Revoked, keys[live.ID].UpdatedAt = true, now.Add(-40*day) // as read: long finished
	if _, err := s.Update(ctx, live.ID, func(k *Key) error { k.Labels = map[string]string{"run": "7"}; return nil }); err != nil {
		t.Fatal(err)
	}
	s.sweep(ctx, raw, keys)
	if n, err := rdb.HExists(ctx, s.hashKey(), live.ID).Result(); err != nil || !n {
		t.Errorf("a key changed since the reload read it was deleted (%v)", err)
	}
}

// TestSweepOnABusyChannel: the periodic reload, and its sweep, run every
// resyncEvery even while changes keep arriving (each used to restart the
// wait, and a swarm minting keys without pause never swept).
func TestSweepOnABusyChannel(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	s := NewStore(rdb, "sg:subkey:", log)
	s.resyncEvery = 200 * time.Millisecond
	s.SetRetention(time.Hour)
	old := NewStore(redis.NewClient(&redis.Options{Addr: srv.Addr}), "sg:subkey:", log)
	old.now = func() time.Time { return time.Now().Add(-2 * time.Hour) }
	gone, _, err := old.Create(ctx, Key{Tenant: "demo", ExpiresAt: time.Now().Add(-90 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Run(ctx) }()
	<-s.Synced()
	// A change every 20 ms, ten times faster than resyncEvery.
	busy := NewStore(redis.NewClient(&redis.Options{Addr: srv.Addr}), "sg:subkey:", log)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, _, err := busy.Create(ctx, Key{Tenant: "demo"}); err != nil {
			t.Fatal(err)
		}
		if ok, err := rdb.HExists(ctx, s.hashKey(), gone.ID).Result(); err == nil && !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the expired key was never swept while changes kept arriving")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
