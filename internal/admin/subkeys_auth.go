package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/swarmgate/swarmgate/internal/subkey"
)

// caller is who asks the key API: the admin (admin.token) or a minter, a
// sub-key with minter set, acting for its own tenant only. Nothing in the
// request but the credential decides which.
type caller struct {
	admin bool
	key   *subkey.Key // the minter, when not admin
}

// actor is how the audit log names the caller.
func (c caller) actor() string {
	switch {
	case c.admin:
		return "admin"
	case c.key != nil:
		return c.key.ID
	}
	return "unauthenticated"
}

// tenant is the minter's tenant ("" for the admin).
func (c caller) tenant() string {
	if c.key == nil {
		return ""
	}
	return c.key.Tenant
}

func bearer(r *http.Request) string {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// authenticate decides the caller. The admin token is compared in
// constant time; a minter is found in the cache by its key's digest, then
// re-read from Redis so that a revocation made a moment ago on another
// replica already counts.
func (k *keyHandlers) authenticate(r *http.Request) (caller, *apiError) {
	tok := bearer(r)
	if tok == "" {
		return caller{}, &apiError{status: http.StatusUnauthorized, msg: "missing bearer token: the admin token or a minter key"}
	}
	if v := k.ac.token.Value(); v != "" {
		got := sha256.Sum256([]byte(tok))
		if subtle.ConstantTimeCompare(got[:], k.ac.sum[:]) == 1 {
			return caller{admin: true}, nil
		}
	}
	m, ok := k.store.LookupMinted(tok)
	if !ok {
		if c, ok, aerr := k.configMinter(tok); ok {
			return c, aerr
		}
		if !k.ac.token.IsZero() && k.ac.token.Value() == "" {
			return caller{}, &apiError{status: http.StatusServiceUnavailable, msg: "admin.token is set but was not resolved in this process"}
		}
		return caller{}, &apiError{status: http.StatusUnauthorized, msg: "wrong bearer token"}
	}
	fresh, err := k.store.Get(r.Context(), m.ID)
	switch {
	case errors.Is(err, subkey.ErrNotFound):
		return caller{}, &apiError{status: http.StatusUnauthorized, msg: "wrong bearer token"}
	case err != nil:
		return caller{}, k.storeFailed("authenticate", err)
	}
	c := caller{key: fresh}
	cfg := k.s.opts.Config()
	switch {
	case fresh.Revoked:
		return c, &apiError{status: http.StatusUnauthorized, msg: "this key has been revoked"}
	case fresh.Expired(k.now()):
		return c, &apiError{status: http.StatusUnauthorized, msg: "this key has expired"}
	case cfg == nil:
		return c, &apiError{status: http.StatusServiceUnavailable, msg: "no config loaded"}
	case !fresh.Minter:
		return c, &apiError{status: http.StatusForbidden, msg: "this key is not a minter"}
	}
	if _, ok := cfg.Tenant(fresh.Tenant); !ok {
		return c, &apiError{status: http.StatusUnauthorized, msg: "this key's tenant is no longer configured"}
	}
	return c, nil
}

// configMinter authenticates a config-file key marked `minter: true`. It
// mints as a sub-key minter would: for its own tenant, within the tenant's
// limits and models, its keys' budgets carved out of the tenant's. ok is
// false when tok is not a config key.
func (k *keyHandlers) configMinter(tok string) (caller, bool, *apiError) {
	cfg := k.s.opts.Config()
	if cfg == nil {
		return caller{}, false, nil
	}
	owner, ok := cfg.LookupKey(tok)
	if !ok {
		return caller{}, false, nil
	}
	c := caller{key: &subkey.Key{ID: owner.Key.ID, Tenant: owner.Tenant.Name, Class: owner.Key.Class,
		Limits: owner.Tenant.Limits, Minter: owner.Key.Minter}}
	switch {
	case owner.Key.Revoked:
		return c, true, &apiError{status: http.StatusUnauthorized, msg: "this key has been revoked"}
	case !owner.Key.Minter:
		return c, true, &apiError{status: http.StatusForbidden, msg: "this key is not a minter"}
	}
	return c, true, nil
}

// notEnabled answers every key API route when the process has no store.
func (k *keyHandlers) notEnabled(w http.ResponseWriter) bool {
	if k.store != nil {
		return false
	}
	k.s.writeAPIError(w, &apiError{status: http.StatusNotImplemented, msg: "sub-keys are not enabled in this process"})
	return true
}

// reading wraps a route that changes nothing: authenticated, not audited.
func (k *keyHandlers) reading(h func(*http.Request, caller) (any, *apiError)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k.notEnabled(w) {
			return
		}
		c, aerr := k.authenticate(r)
		if aerr == nil {
			var body any
			if body, aerr = h(r, c); aerr == nil {
				k.s.writeJSON(w, http.StatusOK, body)
				return
			}
		}
		k.s.writeAPIError(w, aerr)
	})
}

// audited wraps a route that changes a key: whether allowed or refused,
// the operation is logged, and appended to the audit stream when the
// caller authenticated. A client going away does not cut a write short,
// so what the audit says happened did; each store call is still bounded.
func (k *keyHandlers) audited(action string, h func(*http.Request, http.ResponseWriter, caller) result) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k.notEnabled(w) {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), k.s.opts.CheckTimeout)
		defer cancel()
		r = r.WithContext(ctx)
		c, aerr := k.authenticate(r)
		var res result
		if aerr != nil {
			res = refused(aerr, r.PathValue("id"), c.tenant())
		} else {
			res = h(r, w, c)
		}
		k.record(r.Context(), action, c, aerr == nil, res)
		if res.err != nil {
			k.s.writeAPIError(w, res.err)
			return
		}
		k.s.writeJSON(w, res.status, res.body)
	})
}

// record logs one key operation and, when authed (authenticate accepted
// the caller), appends it to the audit stream. It names the key by id: the
// plain key is only ever in a create's answer. A request without a valid
// credential is logged but not streamed, even when its key is known (a
// revoked, expired or non-minter key): whoever holds one could otherwise
// push the real entries out of the capped stream.
func (k *keyHandlers) record(ctx context.Context, action string, c caller, authed bool, res result) {
	e := subkey.Event{Time: k.now().UTC(), Actor: c.actor(), Action: action, KeyID: res.keyID, Tenant: res.tenant,
		Outcome: "allowed", Status: res.status}
	level := slog.LevelInfo
	if res.err != nil {
		e.Outcome, e.Reason, e.Field, level = "refused", res.err.msg, res.err.field, slog.LevelWarn
	}
	k.s.log.Log(ctx, level, "admin: key operation", "actor", e.Actor, "action", e.Action, "key_id", e.KeyID,
		"tenant", e.Tenant, "outcome", e.Outcome, "status", e.Status, "reason", e.Reason, "field", e.Field)
	if !authed {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.s.opts.CheckTimeout)
	defer cancel()
	if err := k.store.Audit(actx, e); err != nil {
		k.s.log.Warn("admin: audit stream", "err", err, "action", action, "key_id", e.KeyID)
	}
}

func (s *Server) writeAPIError(w http.ResponseWriter, e *apiError) {
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="swarmgate-admin"`)
	}
	s.writeJSON(w, e.status, apiErrorBody{Error: apiErrorDetail{Message: e.msg, Field: e.field}})
}
