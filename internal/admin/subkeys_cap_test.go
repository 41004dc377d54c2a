package admin

import (
	"context"
	"net/http"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/subkey"
)

// TestMinterKeyCap: a minter holding subkeys.max_per_minter live keys is
// refused another (429) until one is revoked; the admin and other minters
// are not held by it.
func TestMinterKeyCap(t *testing.T) {
	cfg := keyConfig(t)
	cfg.Subkeys.MaxPerMinter = 2
	e := startKeyAPI(t, func(o *Options) { o.Config = func() *config.Config { return cfg } })
	_, mp := mustCreate(t, e.store, subkey.Key{Tenant: "team-red", Minter: true})
	_, other := mustCreate(t, e.store, subkey.Key{Tenant: "team-red", Minter: true})
	first, _ := e.create(t, mp, map[string]any{})
	e.create(t, mp, map[string]any{})
	if a := e.do(t, http.MethodPost, "/v1/keys", mp, map[string]any{}); a.status != http.StatusTooManyRequests {
		t.Fatalf("a third key for a minter capped at 2: %d %s", a.status, a.raw)
	}
	e.create(t, other, map[string]any{})
	e.create(t, testAdminToken, map[string]any{"tenant": "team-red"})
	if _, err := e.store.Revoke(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	if a := e.do(t, http.MethodPost, "/v1/keys", mp, map[string]any{}); a.status != http.StatusCreated {
		t.Fatalf("after revoking one of its keys: %d %s", a.status, a.raw)
	}
}
