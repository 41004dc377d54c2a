package subkey

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// A full reload that fails (the hash unreadable, Redis still loading its
// data after a restart) is retried until it succeeds: before, a starting
// replica stayed unsynced (never ready, every sub-key refused) until its
// subscription happened to be re-established.
func TestFailedResyncIsRetried(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := rdb.Set(ctx, "sg:subkey:keys", "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s := NewStore(rdb, "sg:subkey:", slog.New(slog.DiscardHandler))
	go func() { _ = s.Run(ctx) }()
	select {
	case <-s.Synced():
		t.Fatal("synced on an unreadable hash")
	case <-time.After(300 * time.Millisecond):
	}
	if err := rdb.Del(ctx, "sg:subkey:keys").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Synced():
	case <-time.After(5 * time.Second):
		t.Fatal("not synced after the hash became readable")
	}
}

// A change whose announcement this replica missed still reaches it: the
// whole hash is reloaded every resyncEvery.
func TestPeriodicResync(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s := NewStore(rdb, "sg:subkey:", slog.New(slog.DiscardHandler))
	s.resyncEvery = 200 * time.Millisecond
	go func() { _ = s.Run(ctx) }()
	<-s.Synced()
	// Written by another store without its announcement reaching s.
	other := NewStore(redis.NewClient(&redis.Options{Addr: srv.Addr}), "sg:subkey:", slog.New(slog.DiscardHandler))
	k, plain, err := other.Create(ctx, Key{Tenant: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for _, ok := s.Lookup(plain); !ok; _, ok = s.Lookup(plain) {
		if time.Now().After(deadline) {
			t.Fatal("the announced key never reached the cache")
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.cache.remove(k.ID) // as if its announcement had been missed
	for {
		if _, ok := s.Lookup(plain); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a key whose announcement was missed never reached the cache")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
