package extproc_test

import (
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/internal/subkey"
	"github.com/swarmgate/swarmgate/internal/subkey/subkeytest"
)

// subkeyStore is a sub-key store on its own redis-server, loaded.
func subkeyStore(t *testing.T) *subkey.Store {
	t.Helper()
	rdb := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	return subkeytest.Run(t, rdb, "t:subkey:")
}

// keyError is a 401 body in either shape: OpenAI's error object, or
// Anthropic's {"type":"error","error":{...}} with the gateway's code.
type keyError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string  `json:"type"`
		Message string  `json:"message"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// Sub-keys minted at run time authenticate at ext_proc like config keys;
// a revoked or expired one is refused 401 with its own code, in the
// client's API shape; an unknown one is an invalid key.
func TestSubkeysAtTheRouter(t *testing.T) {
	store := subkeyStore(t)
	ctx := t.Context()
	labels := map[string]string{"run": "r-1", "team": "search"}
	live, livePlain, err := store.Create(ctx, subkey.Key{Tenant: "alpha", Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	revoked, revokedPlain, err := store.Create(ctx, subkey.Key{Tenant: "alpha"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Revoke(ctx, revoked.ID); err != nil {
		t.Fatal(err)
	}
	_, expiredPlain, err := store.Create(ctx, subkey.Key{Tenant: "alpha", ExpiresAt: time.Now().Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, testConfig(t), func(o *extproc.Options) { o.Authenticator = subkey.Auth{Store: store} })
	shapes := []struct {
		name, path, body string
		extra            []string
		anthropic        bool
	}{
		{"openai", "/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hello"}]}`, nil, false},
		{"anthropic", "/v1/messages", `{"model":"chat","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`, []string{"anthropic-version", "2023-06-01"}, true},
	}
	for _, sh := range shapes {
		for _, tc := range []struct {
			name, key, code string
		}{
			{"live", livePlain, ""},
			{"unknown", "sk-sg-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "invalid_api_key"},
			{"revoked", revokedPlain, "key_revoked"},
			{"expired", expiredPlain, "key_expired"},
			{"revoked config key", keyRevoked, "key_revoked"},
		} {
			t.Run(sh.name+"/"+tc.name, func(t *testing.T) {
				st, cancel := h.stream(t, contract.RoleRouter)
				defer cancel()
				headers := append([]string{":method", "POST", ":path", sh.path, "authorization", "Bearer " + tc.key, "content-type", "application/json"}, sh.extra...)
				resp := roundTrip(t, st, reqHeaders(false, headers...))
				ir := resp.GetImmediateResponse()
				if tc.code == "" {
					if ir != nil {
						t.Fatalf("refused: %d %s", ir.GetStatus().GetCode(), ir.GetBody())
					}
					if resp := roundTrip(t, st, reqBody(sh.body)); resp.GetRequestBody() == nil {
						t.Fatalf("not admitted: %v", resp)
					}
					return
				}
				if ir == nil || ir.GetStatus().GetCode() != 401 {
					t.Fatalf("want 401 %s, got %v", tc.code, resp)
				}
				var e keyError
				if err := json.Unmarshal(ir.GetBody(), &e); err != nil || e.Error.Code == nil || *e.Error.Code != tc.code {
					t.Fatalf("body %s, want code %s (%v)", ir.GetBody(), tc.code, err)
				}
				if sh.anthropic && (e.Type != "error" || e.Error.Type != "authentication_error") {
					t.Errorf("not Anthropic's shape: %s", ir.GetBody())
				}
				if !sh.anthropic && (e.Type != "" || e.Error.Type != "invalid_request_error") {
					t.Errorf("not OpenAI's shape: %s", ir.GetBody())
				}
			})
		}
	}
	t.Run("ledger entry names the sub-key", func(t *testing.T) {
		st, cancel := h.stream(t, contract.RoleRouter)
		defer cancel()
		roundTrip(t, st, reqHeaders(false, chatHeaders(livePlain)...))
		if resp := roundTrip(t, st, reqBody(shapes[0].body)); resp.GetRequestBody() == nil {
			t.Fatalf("not admitted: %v", resp)
		}
		roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "application/json",
			contract.HeaderBackend, "small", contract.HeaderUpstreamKey, "small-1"))
		roundTrip(t, st, respBody(fixture(t, "openai_chat.json"), true))
		e := h.cap.waitEntry(t)
		if e.Tenant != "alpha" || e.VirtualKeyID != live.ID || !maps.Equal(e.KeyLabels, labels) {
			t.Fatalf("entry tenant %q key %q labels %v, want alpha %q %v", e.Tenant, e.VirtualKeyID, e.KeyLabels, live.ID, labels)
		}
	})
}
