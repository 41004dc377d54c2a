// Package subkeytest runs a sub-key store for a test: its change stream
// subscribed and its cache loaded before the test goes on.
package subkeytest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/subkey"
)

// Run starts a store on rdb under prefix, waits (at most 5 s) for its
// first load and stops it when the test ends.
func Run(t testing.TB, rdb redis.UniversalClient, prefix string) *subkey.Store {
	t.Helper()
	s := subkey.NewStore(rdb, prefix, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { _ = s.Run(ctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })
	select {
	case <-s.Synced():
	case <-time.After(5 * time.Second):
		t.Fatal("sub-key store not synced")
	}
	return s
}
