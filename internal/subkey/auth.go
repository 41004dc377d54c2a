package subkey

import (
	"strings"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Reason says why a presented key does not authenticate.
type Reason int

const (
	OK Reason = iota
	Unknown
	Revoked
	Expired
)

// Code is the error code clients see for the reason.
func (r Reason) Code() string {
	switch r {
	case Revoked:
		return "key_revoked"
	case Expired:
		return "key_expired"
	case Unknown:
		return "invalid_api_key"
	}
	return ""
}

// Refusal is the 401 a caller answers for a reason, in the OpenAI and the
// Anthropic shapes; the caller picks the shape of the route.
type Refusal struct {
	Status    int
	OpenAI    []byte
	Anthropic []byte
}

// RefusalFor returns the 401 body of r (Unknown, Revoked or Expired).
func RefusalFor(r Reason) Refusal {
	msg := map[Reason]string{
		Unknown: "Invalid API key.",
		Revoked: "This API key has been revoked.",
		Expired: "This API key has expired.",
	}[r]
	return Refusal{
		Status:    401,
		OpenAI:    []byte(`{"error":{"message":"` + msg + `","type":"invalid_request_error","param":null,"code":"` + r.Code() + `"}}`),
		Anthropic: []byte(`{"type":"error","error":{"type":"authentication_error","message":"` + msg + `","code":"` + r.Code() + `"}}`),
	}
}

// Authenticator resolves a presented key: the config's keys first, then
// the sub-keys. It is what the ext_proc server calls per request.
type Authenticator interface {
	Authenticate(cfg *config.Config, presented string) (config.KeyOwner, Reason)
}

// mintedWait bounds how long a presented key of the sub-key form that no
// cache holds waits for the store's change stream (the changes reach every
// replica within milliseconds; an unknown key is answered after it).
const mintedWait = 250 * time.Millisecond

// Auth is the Authenticator over a Store (nil: config keys only).
type Auth struct {
	Store *Store
	Now   func() time.Time
}

// Authenticate never reaches Redis: config keys are an index in cfg, and
// sub-keys are in the store's cache.
func (a Auth) Authenticate(cfg *config.Config, presented string) (config.KeyOwner, Reason) {
	d := config.KeyDigest(presented)
	if o, ok := cfg.LookupDigest(d); ok {
		if o.Key.Revoked {
			return o, Revoked
		}
		return o, OK
	}
	if a.Store == nil {
		return config.KeyOwner{}, Unknown
	}
	k, ok := a.Store.LookupDigest(d)
	if !ok && strings.HasPrefix(presented, plainPrefix) {
		// Minted a moment ago on another replica, its change on its way
		// here: a planner hands a fresh key to a worker whose first call
		// may reach any replica within milliseconds.
		k, ok = a.Store.cache.awaitDigest(d, mintedWait)
	}
	if !ok {
		return config.KeyOwner{}, Unknown
	}
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	t, ok := cfg.Tenant(k.Tenant)
	if !ok {
		// The tenant left the config: its sub-keys go with it.
		return config.KeyOwner{}, Unknown
	}
	vk := k.owned
	if vk == nil { // a key that never went through the cache
		vk = virtualKey(k)
	}
	o := config.KeyOwner{Tenant: k.narrowed(cfg, t), Key: vk}
	var minter *Key
	if k.Parent != "" {
		minter, _ = a.Store.Cached(k.Parent)
	}
	if minter != nil {
		o.Parent = minter.owned
		if o.Parent == nil {
			o.Parent = virtualKey(minter)
		}
	}
	switch {
	case k.Revoked, minterRevoked(t, k, minter):
		return o, Revoked
	case minter != nil && minter.Expired(now()):
		// A minter whose run ended (its ttl set after it minted keys
		// without one) ends its keys' runs too.
		return o, Expired
	case k.Expired(now()):
		return o, Expired
	}
	return o, OK
}

// minterRevoked reports whether the key that minted k is revoked, or gone:
// revoking a minter takes the keys it minted with it (a planner's run
// stopped at once, not at its workers' expiry). The minter is a sub-key
// in the cache (minter, nil when none is), or a config key of k's tenant
// (keys[].minter). Cache only: a minted key reached the cache after its
// minter did.
func minterRevoked(t *config.Tenant, k, minter *Key) bool {
	if k.Parent == "" {
		return false
	}
	if minter != nil {
		return minter.Revoked
	}
	for i := range t.Keys {
		if t.Keys[i].ID == k.Parent {
			return t.Keys[i].Revoked
		}
	}
	return true
}

// virtualKey is the config form of k the data path hands on; the cache
// builds it once per key, not per request (keys in the cache never change).
func virtualKey(k *Key) *config.VirtualKey {
	return &config.VirtualKey{ID: k.ID, Hash: k.Hash, Class: k.Class, Revoked: k.Revoked, Labels: k.Labels, Limits: k.Limits}
}

// restrict returns t itself when models is empty, else a copy of t allowed
// only the models both t and the key allow.
// narrowed is k's tenant narrowed to k's models, made once per config
// (a model-restricted key copied its tenant on every request before).
func (k *Key) narrowed(cfg *config.Config, t *config.Tenant) *config.Tenant {
	if len(k.Models) == 0 {
		return t
	}
	if k.tenant == nil { // a key that never went through the cache
		return restrict(t, k.Models)
	}
	if n := k.tenant.p.Load(); n != nil && n.cfg == cfg && n.base == t {
		return n.t
	}
	n := &narrowedTenant{cfg: cfg, base: t, t: restrict(t, k.Models)}
	k.tenant.p.Store(n)
	return n.t
}

// narrowedTenant is a key's tenant narrowed to its models under one config.
type narrowedTenant struct {
	cfg     *config.Config
	base, t *config.Tenant
}

func restrict(t *config.Tenant, models []string) *config.Tenant {
	if len(models) == 0 {
		return t
	}
	c := *t
	c.Models = nil
	for _, m := range models {
		if t.Allows(m) {
			c.Models = append(c.Models, m)
		}
	}
	if c.Models == nil {
		c.Models = []string{}
	}
	return &c
}
