package admin

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/subkey"
)

// A key that authenticate refuses (revoked, expired, not a minter) is
// logged but never streamed: otherwise whoever holds one could flood the
// capped audit stream and push the real entries out.
func TestRefusedCredentialNotStreamed(t *testing.T) {
	e := startKeyAPI(t, nil)
	ctx := context.Background()
	revoked, rp := mustCreate(t, e.store, subkey.Key{Tenant: "team-red", Minter: true})
	if _, err := e.store.Revoke(ctx, revoked.ID); err != nil {
		t.Fatal(err)
	}
	_, ep := mustCreate(t, e.store, subkey.Key{Tenant: "team-red", Minter: true, ExpiresAt: time.Now().Add(time.Millisecond)})
	_, worker := mustCreate(t, e.store, subkey.Key{Tenant: "team-red"})
	target, _ := mustCreate(t, e.store, subkey.Key{Tenant: "team-red"})
	time.Sleep(2 * time.Millisecond) // the expiring minter above has expired

	streamLen := func() int64 {
		t.Helper()
		n, err := e.rdb.XLen(ctx, "sg:audit").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The admin's allowed revoke at the end proves the stream is written
	// at all.
	before := streamLen()

	routes := []struct{ method, path, body string }{
		{http.MethodPost, "/v1/keys", `{}`},
		{http.MethodPatch, "/v1/keys/" + target.ID, `{"labels":{"x":"y"}}`},
		{http.MethodPost, "/v1/keys/" + target.ID + "/revoke", ""},
		{http.MethodDelete, "/v1/keys/" + target.ID, ""},
	}
	for _, tc := range []struct {
		name, token string
		status      int
		reason      string
	}{
		{"revoked sub-key", rp, http.StatusUnauthorized, "revoked"},
		{"expired sub-key", ep, http.StatusUnauthorized, "expired"},
		{"sub-key not a minter", worker, http.StatusForbidden, "not a minter"},
		{"config key not a minter", testSecrets["T_VIRTUAL_KEY"], http.StatusForbidden, "not a minter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, rt := range routes {
				var body any
				if rt.body != "" {
					body = rt.body
				}
				for range 3 {
					a := e.do(t, rt.method, rt.path, tc.token, body)
					if a.status != tc.status || !strings.Contains(a.message(), tc.reason) {
						t.Fatalf("%s %s: %d %s, want %d %q", rt.method, rt.path, a.status, a.raw, tc.status, tc.reason)
					}
				}
			}
			if n := streamLen(); n != before {
				t.Fatalf("audit stream grew by %d entries on refused credentials", n-before)
			}
		})
	}
	if !strings.Contains(e.logs.String(), `"actor":"`+revoked.ID+`","action":"revoke"`) {
		t.Errorf("a refused credential's operation was not logged:\n%s", e.logs.String())
	}
	if k, _ := e.store.Get(ctx, target.ID); k.Revoked || len(k.Labels) != 0 {
		t.Fatalf("a refused credential changed the key: %+v", k)
	}

	if a := e.do(t, http.MethodPost, "/v1/keys/"+target.ID+"/revoke", testAdminToken, nil); a.status != http.StatusOK {
		t.Fatalf("admin revoke: %d %s", a.status, a.raw)
	}
	if n := streamLen(); n != before+1 {
		t.Fatalf("audit stream has %d new entries after the admin's revoke, want 1", n-before)
	}
}
