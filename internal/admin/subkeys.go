package admin

import (
	"context"
	"errors"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/subkey"
)

// SubKeyStore is what the key API (/v1/keys) needs of the sub-key store;
// *subkey.Store is one. List and Lookup read the store's cache, the
// others Redis.
type SubKeyStore interface {
	Create(ctx context.Context, k subkey.Key) (*subkey.Key, string, error)
	Get(ctx context.Context, id string) (*subkey.Key, error)
	Update(ctx context.Context, id string, change func(*subkey.Key) error) (*subkey.Key, error)
	Revoke(ctx context.Context, id string) (*subkey.Key, error)
	List(tenant string, labels map[string]string) []*subkey.Key
	// LookupMinted finds a presented key (a minter authenticates with
	// it), waiting a moment for one minted on another replica.
	LookupMinted(presented string) (*subkey.Key, bool)
	Audit(ctx context.Context, e subkey.Event) error
	RecentAudit(ctx context.Context, n int) ([]subkey.Event, error)
}

// BudgetLeft tells what remains, this period, of the budgets a key minted
// by parent ("" for the admin's keys) counts toward: the parent's, those
// above it and the tenant's (accounting/reserve). ok is false when none
// has a budget.
type BudgetLeft interface {
	Left(ctx context.Context, tenant, parent string) (left float64, ok bool, err error)
}

// keyAPI reports whether path belongs to the key API, which admits writes
// and authenticates callers itself (subkeys_auth.go). Only a clean path
// counts: "/v1/keys/../config_dump" gets the guard's usual checks.
func keyAPI(p string) bool {
	return (p == "/v1/keys" || strings.HasPrefix(p, "/v1/keys/")) && path.Clean(p) == p
}

func (s *Server) keyRoutes(mux *http.ServeMux, ac *access) {
	k := &keyHandlers{s: s, ac: ac, store: s.opts.SubKeys, now: time.Now}
	mux.Handle("POST /v1/keys", k.audited("create", k.create))
	mux.Handle("GET /v1/keys", k.reading(k.list))
	mux.Handle("GET /v1/keys/audit", k.reading(k.audit))
	mux.Handle("GET /v1/keys/{id}", k.reading(k.show))
	mux.Handle("PATCH /v1/keys/{id}", k.audited("update", k.update))
	mux.Handle("POST /v1/keys/{id}/revoke", k.audited("revoke", k.revoke))
	mux.Handle("DELETE /v1/keys/{id}", k.audited("revoke", k.revoke))
}

type keyHandlers struct {
	s     *Server
	ac    *access
	store SubKeyStore
	now   func() time.Time
}

// result is what a key operation answers, and what its audit entry says.
type result struct {
	status        int
	body          any
	keyID, tenant string
	err           *apiError
}

func refused(err *apiError, keyID, tenant string) result {
	return result{status: err.status, err: err, keyID: keyID, tenant: tenant}
}

// keyView is a sub-key as the API shows it: never the plain key, never
// its hash.
type keyView struct {
	ID        string            `json:"id"`
	Tenant    string            `json:"tenant"`
	Parent    string            `json:"parent,omitempty"`
	Limits    config.Limits     `json:"limits"`
	Models    []string          `json:"models,omitempty"`
	Class     string            `json:"class,omitempty"`
	ExpiresAt time.Time         `json:"expires_at,omitzero"`
	Labels    map[string]string `json:"labels,omitempty"`
	Minter    bool              `json:"minter,omitempty"`
	Revoked   bool              `json:"revoked,omitempty"`
	Expired   bool              `json:"expired,omitempty"`
	Budget    *subkey.Budget    `json:"budget,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

func view(k *subkey.Key, now time.Time) keyView {
	return keyView{ID: k.ID, Tenant: k.Tenant, Parent: k.Parent, Limits: k.Limits, Models: k.Models, Class: k.Class,
		ExpiresAt: k.ExpiresAt, Labels: k.Labels, Minter: k.Minter, Revoked: k.Revoked, Expired: k.Expired(now),
		Budget: k.Budget, CreatedAt: k.CreatedAt, UpdatedAt: k.UpdatedAt}
}

type keyBody struct {
	Key keyView `json:"key"`
}

// createdBody is the only answer that carries the plain key.
type createdBody struct {
	APIKey string  `json:"api_key"`
	Key    keyView `json:"key"`
}

type listBody struct {
	Keys []keyView `json:"keys"`
}

type auditBody struct {
	Entries []subkey.Event `json:"entries"`
}

var createFields = []string{"tenant", "limits", "models", "class", "ttl", "expires_at", "labels", "minter", "budget"}

func (k *keyHandlers) create(r *http.Request, w http.ResponseWriter, c caller) result {
	o, aerr := readObject(w, r, createFields...)
	if aerr != nil {
		return refused(aerr, "", c.tenant())
	}
	key, aerr := k.newKey(o, c)
	if aerr != nil {
		return refused(aerr, "", key.Tenant)
	}
	cfg := k.s.opts.Config()
	if cfg == nil {
		return refused(&apiError{status: http.StatusServiceUnavailable, msg: "no config loaded"}, "", key.Tenant)
	}
	if aerr := checkKey(cfg, &key, c.key, k.now()); aerr != nil {
		return refused(aerr, "", key.Tenant)
	}
	if aerr := k.capped(cfg, &key); aerr != nil {
		return refused(aerr, "", key.Tenant)
	}
	if aerr := k.carved(r.Context(), &key, c); aerr != nil {
		return refused(aerr, "", key.Tenant)
	}
	created, plain, err := k.store.Create(r.Context(), key)
	if err != nil {
		return refused(k.storeFailed("create", err), "", key.Tenant)
	}
	return result{status: http.StatusCreated, body: createdBody{APIKey: plain, Key: view(created, k.now())},
		keyID: created.ID, tenant: created.Tenant}
}

// newKey builds the key a create request asks for. A minter's key is of
// the minter's own tenant, and what the request leaves out (limits,
// models, class, expiry) is the minter's.
func (k *keyHandlers) newKey(o object, c caller) (subkey.Key, *apiError) {
	var key subkey.Key
	var lim limitsBody
	for _, d := range []struct {
		name string
		v    any
	}{{"tenant", &key.Tenant}, {"limits", &lim}, {"models", &key.Models}, {"class", &key.Class},
		{"minter", &key.Minter}, {"budget", &key.Budget}} {
		if aerr := o.decode(d.name, d.v); aerr != nil {
			return subkey.Key{Tenant: c.tenant()}, aerr
		}
	}
	var aerr *apiError
	if key.Labels, aerr = o.labels(); aerr != nil {
		return subkey.Key{Tenant: c.tenant()}, aerr
	}
	exp, hasExp, aerr := o.expiry(k.now())
	if aerr != nil {
		return subkey.Key{Tenant: c.tenant()}, aerr
	}
	key.ExpiresAt = exp
	if c.admin {
		key.Limits = lim.apply(config.Limits{})
		if key.Tenant == "" {
			return key, badRequest("tenant", "required")
		}
		return key, nil
	}
	m := c.key
	switch {
	case key.Tenant != "" && key.Tenant != m.Tenant:
		return subkey.Key{Tenant: m.Tenant}, &apiError{status: http.StatusForbidden, field: "tenant",
			msg: "a minter of tenant " + strconv.Quote(m.Tenant) + " may not mint for " + strconv.Quote(key.Tenant)}
	case key.Minter:
		return subkey.Key{Tenant: m.Tenant}, &apiError{status: http.StatusForbidden, field: "minter",
			msg: "only the admin may create a minter"}
	}
	key.Tenant, key.Parent = m.Tenant, m.ID
	key.Limits = lim.apply(m.Limits)
	if !o.has("models") {
		key.Models = m.Models
	}
	if !o.has("class") {
		key.Class = m.Class
	}
	if !hasExp {
		key.ExpiresAt = m.ExpiresAt
	}
	return key, nil
}

// apply returns base with the limits the request gave.
func (l limitsBody) apply(base config.Limits) config.Limits {
	for _, f := range []struct {
		v   *int
		dst *int
	}{{l.RPM, &base.RPM}, {l.RPD, &base.RPD}, {l.TPM, &base.TPM}} {
		if f.v != nil {
			*f.dst = *f.v
		}
	}
	return base
}

// checkKey validates key against the config and its parent; an unknown
// tenant, model or class is a 400, anything beyond a minter's own rights
// a 403.
func checkKey(cfg *config.Config, key, parent *subkey.Key, now time.Time) *apiError {
	err := subkey.Validate(cfg, key, parent, now)
	if err == nil {
		return nil
	}
	var fe *subkey.FieldError
	if !errors.As(err, &fe) {
		return badRequest("", err.Error())
	}
	aerr := badRequest(fe.Field, fe.Reason)
	if parent != nil && subkey.Validate(cfg, key, nil, now) == nil {
		aerr.status = http.StatusForbidden
	}
	return aerr
}

// capped refuses a key minted by a minter that already holds
// subkeys.max_per_minter live keys: a planner minting in a loop filled the
// store, and the memory of every replica, which each holds every key.
// Counted in this replica's cache, so replicas minting at once for one
// minter may pass the bound by a few.
func (k *keyHandlers) capped(cfg *config.Config, key *subkey.Key) *apiError {
	limit := cfg.Subkeys.MaxPerMinter
	if key.Parent == "" || limit <= 0 {
		return nil
	}
	now, live := k.now(), 0
	for _, o := range k.store.List(key.Tenant, nil) {
		if o.Parent == key.Parent && !o.Revoked && !o.Expired(now) {
			live++
		}
	}
	if live < limit {
		return nil
	}
	return &apiError{status: http.StatusTooManyRequests,
		msg: "this minter holds " + strconv.Itoa(live) + " live keys, the most subkeys.max_per_minter allows: revoke finished ones, or let them expire"}
}

// carved refuses a new key's budget larger than what remains of the
// budgets above it: a budget is carved out of what is left, not out of
// what was granted. Beyond a minter's own budget it is a right the minter
// lacks (403); the admin asking more than the tenant has left is a 400.
func (k *keyHandlers) carved(ctx context.Context, key *subkey.Key, c caller) *apiError {
	bl := k.s.opts.BudgetLeft
	if key.Budget == nil || bl == nil {
		return nil
	}
	left, ok, err := bl.Left(ctx, key.Tenant, key.Parent)
	if err != nil {
		return k.storeFailed("budget", err)
	}
	if !ok || key.Budget.Amount <= left {
		return nil
	}
	aerr := badRequest("budget.amount", "must be at most what remains of the budgets above it: "+strconv.FormatFloat(left, 'f', -1, 64))
	if !c.admin {
		aerr.status = http.StatusForbidden
	}
	return aerr
}

// raised refuses an update that grows key's budget by more than what
// remains of the budgets above it: its current budget was carved out at
// creation, so only the growth needs room (a new period, or a first
// budget, is carved whole). Lowering or clearing is always allowed.
func (k *keyHandlers) raised(ctx context.Context, key *subkey.Key, next *subkey.Budget) *apiError {
	if next == nil {
		return nil
	}
	grow := next.Amount
	if old := key.Budget; old != nil && old.Period == next.Period {
		grow -= old.Amount
	}
	if grow <= 0 {
		return nil
	}
	carve := *key
	carve.Budget = &subkey.Budget{Amount: grow, Period: next.Period}
	if aerr := k.carved(ctx, &carve, caller{admin: true}); aerr != nil {
		aerr.msg = "may grow by at most what remains of the budgets above it" + strings.TrimPrefix(aerr.msg, "must be at most what remains of the budgets above it")
		return aerr
	}
	return nil
}

var updateFields = []string{"limits", "labels", "ttl", "expires_at", "budget"}

// update changes limits (the fields given), labels (replaced; null
// clears), expiry (ttl or expires_at; null clears) and budget (replaced;
// null clears). The result is validated against the config and, for a
// minted key, its parent still in the store.
func (k *keyHandlers) update(r *http.Request, w http.ResponseWriter, c caller) result {
	id := r.PathValue("id")
	if !c.admin {
		return refused(&apiError{status: http.StatusForbidden, msg: "only the admin may update a key"}, id, c.tenant())
	}
	o, aerr := readObject(w, r, updateFields...)
	if aerr != nil {
		return refused(aerr, id, "")
	}
	var lim limitsBody
	var budget *subkey.Budget
	if aerr := o.decode("limits", &lim); aerr != nil {
		return refused(aerr, id, "")
	}
	if aerr := o.decode("budget", &budget); aerr != nil {
		return refused(aerr, id, "")
	}
	labels, aerr := o.labels()
	if aerr != nil {
		return refused(aerr, id, "")
	}
	now := k.now()
	exp, hasExp, aerr := o.expiry(now)
	if aerr != nil {
		return refused(aerr, id, "")
	}
	cfg := k.s.opts.Config()
	if cfg == nil {
		return refused(&apiError{status: http.StatusServiceUnavailable, msg: "no config loaded"}, id, "")
	}
	var tenant string
	updated, err := k.store.Update(r.Context(), id, func(key *subkey.Key) error {
		tenant = key.Tenant
		key.Limits = lim.apply(key.Limits)
		if o.has("labels") {
			key.Labels = labels
		}
		if o.has("budget") {
			if aerr := k.raised(r.Context(), key, budget); aerr != nil {
				return aerr
			}
			key.Budget = budget
		}
		if hasExp {
			key.ExpiresAt = exp
		}
		parent, err := k.parentOf(r.Context(), key)
		if err != nil {
			return err
		}
		if aerr := checkKey(cfg, key, parent, now); aerr != nil {
			aerr.status = http.StatusBadRequest // the admin asks: a bad value, not a right it lacks
			return aerr
		}
		return nil
	})
	if err != nil {
		return refused(k.opError("update", err), id, tenant)
	}
	return result{status: http.StatusOK, body: keyBody{view(updated, now)}, keyID: id, tenant: updated.Tenant}
}

// parentOf returns the minter of key while it is in the store (nil for
// the admin's keys and when the parent is gone).
func (k *keyHandlers) parentOf(ctx context.Context, key *subkey.Key) (*subkey.Key, error) {
	if key.Parent == "" {
		return nil, nil
	}
	p, err := k.store.Get(ctx, key.Parent)
	if errors.Is(err, subkey.ErrNotFound) {
		return nil, nil
	}
	return p, err
}

func (k *keyHandlers) revoke(r *http.Request, _ http.ResponseWriter, c caller) result {
	id := r.PathValue("id")
	key, aerr := k.visible(r.Context(), id, c)
	if aerr != nil {
		return refused(aerr, id, c.tenant())
	}
	revoked, err := k.store.Revoke(r.Context(), id)
	if err != nil {
		return refused(k.opError("revoke", err), id, key.Tenant)
	}
	return result{status: http.StatusOK, body: keyBody{view(revoked, k.now())}, keyID: id, tenant: revoked.Tenant}
}

// visible reads key id if the caller may see it: the admin any key, a
// minter its own tenant's.
func (k *keyHandlers) visible(ctx context.Context, id string, c caller) (*subkey.Key, *apiError) {
	key, err := k.store.Get(ctx, id)
	if err != nil {
		return nil, k.opError("read", err)
	}
	if !c.admin && key.Tenant != c.key.Tenant {
		return nil, &apiError{status: http.StatusForbidden, msg: "key " + id + " is not of tenant " + strconv.Quote(c.key.Tenant)}
	}
	return key, nil
}

func (k *keyHandlers) show(r *http.Request, c caller) (any, *apiError) {
	key, aerr := k.visible(r.Context(), r.PathValue("id"), c)
	if aerr != nil {
		return nil, aerr
	}
	return keyBody{view(key, k.now())}, nil
}

func (k *keyHandlers) list(r *http.Request, c caller) (any, *apiError) {
	q := r.URL.Query()
	tenant := q.Get("tenant")
	if !c.admin {
		if tenant != "" && tenant != c.key.Tenant {
			return nil, &apiError{status: http.StatusForbidden, field: "tenant",
				msg: "a minter of tenant " + strconv.Quote(c.key.Tenant) + " may not list " + strconv.Quote(tenant)}
		}
		tenant = c.key.Tenant
	}
	labels := map[string]string{}
	for _, l := range q["label"] {
		n, v, ok := strings.Cut(l, "=")
		if !ok || n == "" {
			return nil, badRequest("label", strconv.Quote(l)+" is not name=value")
		}
		if _, dup := labels[n]; dup {
			return nil, badRequest("label", "label "+strconv.Quote(n)+" given twice")
		}
		labels[n] = v
	}
	now := k.now()
	out := listBody{Keys: []keyView{}}
	for _, key := range k.store.List(tenant, labels) {
		out.Keys = append(out.Keys, view(key, now))
	}
	return out, nil
}

// maxAuditEntries bounds GET /v1/keys/audit?limit=.
const maxAuditEntries = 1000

func (k *keyHandlers) audit(r *http.Request, c caller) (any, *apiError) {
	if !c.admin {
		return nil, &apiError{status: http.StatusForbidden, msg: "only the admin may read the audit log"}
	}
	n := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		l, err := strconv.Atoi(v)
		if err != nil || l <= 0 {
			return nil, badRequest("limit", "want a positive number")
		}
		n = min(l, maxAuditEntries)
	}
	entries, err := k.store.RecentAudit(r.Context(), n)
	if err != nil {
		return nil, k.storeFailed("audit", err)
	}
	return auditBody{Entries: entries}, nil
}

// opError maps a store error: not found is a 404, an invalid change the
// 4xx checkKey gave, anything else a 503.
func (k *keyHandlers) opError(op string, err error) *apiError {
	var aerr *apiError
	switch {
	case errors.As(err, &aerr):
		return aerr
	case errors.Is(err, subkey.ErrNotFound):
		return &apiError{status: http.StatusNotFound, msg: "no such key"}
	case errors.Is(err, subkey.ErrConflict):
		return &apiError{status: http.StatusConflict, msg: "the key changed while it was updated; try again"}
	}
	return k.storeFailed(op, err)
}

func (k *keyHandlers) storeFailed(op string, err error) *apiError {
	k.s.log.Warn("admin: sub-key store", "op", op, "err", err)
	return &apiError{status: http.StatusServiceUnavailable, msg: "sub-key store: " + op + " failed"}
}
