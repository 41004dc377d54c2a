package config

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// index holds lookups built once after validation.
type index struct {
	backends map[string]*Backend
	models   map[string]*Model
	tenants  map[string]*Tenant
	keys     map[[sha256.Size]byte]KeyOwner // virtual-key SHA-256 -> owner
	identity []byte                         // see IdentityKey
	static   map[string]bool                // see StaticHeader
	joined   map[string]string              // see TargetBackends
}

// KeyOwner is the tenant and virtual key a presented key hash belongs to.
type KeyOwner struct {
	Tenant *Tenant
	Key    *VirtualKey
	// Parent is the sub-key that minted Key, when a sub-key did (nil for a
	// config key, or a key minted by a config key): its limits bound Key's
	// requests too.
	Parent *VirtualKey
}

type parsedURL struct {
	scheme, host, path string
	port               uint32
}

func (c *Config) buildIndex() {
	c.index = index{
		backends: make(map[string]*Backend, len(c.Backends)),
		models:   make(map[string]*Model, len(c.Models)),
		tenants:  make(map[string]*Tenant, len(c.Tenants)),
		keys:     make(map[[sha256.Size]byte]KeyOwner),
	}
	c.index.static = map[string]bool{}
	for i := range c.Backends {
		c.index.backends[c.Backends[i].Name] = &c.Backends[i]
		for h := range c.Backends[i].Headers {
			c.index.static[strings.ToLower(h)] = true
		}
	}
	c.index.joined = make(map[string]string, len(c.Models))
	for i := range c.Models {
		m := &c.Models[i]
		c.index.models[m.Name] = m
		var b strings.Builder
		for j, t := range m.Targets {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(t.Backend)
		}
		c.index.joined[m.Name] = b.String()
	}
	c.index.identity = c.identityKey()
	for i := range c.Tenants {
		t := &c.Tenants[i]
		c.index.tenants[t.Name] = t
		for j := range t.Keys {
			var sum [sha256.Size]byte
			h, ok := strings.CutPrefix(t.Keys[j].Hash, "sha256:")
			if n, err := hex.Decode(sum[:], []byte(h)); !ok || err != nil || n != len(sum) {
				continue // unresolved (SkipSecrets) or invalid: never matches
			}
			c.index.keys[sum] = KeyOwner{Tenant: t, Key: &t.Keys[j]}
		}
	}
}

// Backend returns the named backend.
func (c *Config) Backend(name string) (*Backend, bool) {
	b, ok := c.index.backends[name]
	return b, ok
}

// Model returns the model alias.
func (c *Config) Model(name string) (*Model, bool) {
	m, ok := c.index.models[name]
	return m, ok
}

// Tenant returns the named tenant.
func (c *Config) Tenant(name string) (*Tenant, bool) {
	t, ok := c.index.tenants[name]
	return t, ok
}

// LookupKey finds the owner of a presented virtual key (plain text). Only
// its hash is compared. The caller must still check KeyOwner.Key.Revoked.
func (c *Config) LookupKey(presented string) (KeyOwner, bool) {
	return c.LookupDigest(KeyDigest(presented))
}

// LookupDigest is LookupKey for a key already hashed with KeyDigest (the
// data path hashes a presented key once for every key source it asks).
func (c *Config) LookupDigest(d [sha256.Size]byte) (KeyOwner, bool) {
	o, ok := c.index.keys[d]
	return o, ok
}

// KeyDigest is the SHA-256 of a presented key, hashed from a stack copy:
// converting a string of more than 32 bytes (a generated key, a sub-key)
// to []byte would cost an allocation on every request.
func KeyDigest(presented string) [sha256.Size]byte {
	var buf [256]byte
	if len(presented) <= len(buf) {
		return sha256.Sum256(append(buf[:0], presented...))
	}
	return sha256.Sum256([]byte(presented))
}

// HashKey is the stored form of a virtual key: "sha256:<hex>".
func HashKey(plain string) string {
	sum := sha256.Sum256([]byte(plain))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Allows reports whether the tenant may use the model alias.
func (t *Tenant) Allows(model string) bool {
	for _, m := range t.Models {
		if m == "*" || m == model {
			return true
		}
	}
	return false
}

// Scheme is "http" or "https".
func (b *Backend) Scheme() string { return b.url.scheme }

// Host is the backend's host name or IP (no port).
func (b *Backend) Host() string { return b.url.host }

// Port is the backend's port (default 443 for https, 80 for http).
func (b *Backend) Port() uint32 { return b.url.port }

// BasePath is the path prefix of BaseURL without a trailing slash, e.g. "/v1".
func (b *Backend) BasePath() string { return b.url.path }

// TLSEnabled reports whether the backend is reached over HTTPS.
func (b *Backend) TLSEnabled() bool { return b.url.scheme == "https" }

// ServerName is the SNI and Host to present: SNI if set, else the URL host.
func (b *Backend) ServerName() string {
	if b.SNI != "" {
		return b.SNI
	}
	return b.url.host
}

// UpstreamPath maps a client path such as "/v1/chat/completions" onto the
// backend's base path, e.g. "/openai/v1/chat/completions".
func (b *Backend) UpstreamPath(clientPath string) string {
	rest := strings.TrimPrefix(clientPath, "/v1")
	return b.url.path + rest
}

func parseBaseURL(raw string) (parsedURL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return parsedURL{}, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return parsedURL{}, errString("scheme must be http or https")
	}
	if u.Hostname() == "" {
		return parsedURL{}, errString("no host")
	}
	if u.User != nil {
		return parsedURL{}, errString("credentials in the URL are not allowed; use keys")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return parsedURL{}, errString("query and fragment are not allowed")
	}
	p := parsedURL{scheme: u.Scheme, host: u.Hostname(), path: strings.TrimRight(u.Path, "/")}
	switch {
	case u.Port() != "":
		n, err := strconv.ParseUint(u.Port(), 10, 16)
		if err != nil || n == 0 {
			return parsedURL{}, errString("invalid port")
		}
		p.port = uint32(n)
	case u.Scheme == "https":
		p.port = 443
	default:
		p.port = 80
	}
	return p, nil
}

// IsIP reports whether the backend host is a literal IP address.
func (b *Backend) IsIP() bool { return net.ParseIP(b.url.host) != nil }

type errString string

func (e errString) Error() string { return string(e) }

// IdentityKey is the key material request identities are signed with
// (identity.signing_key, or derived from every provider key when unset).
// Two replicas loaded from the same config agree on it.
func (c *Config) IdentityKey() []byte { return c.index.identity }

func (c *Config) identityKey() []byte {
	h := sha256.New()
	if v := c.Identity.SigningKey.Value(); v != "" {
		h.Write([]byte("configured\x00"))
		h.Write([]byte(v))
		return h.Sum(nil)
	}
	// Derived: secret to anyone who does not hold the provider keys, and
	// those are exactly what it protects.
	h.Write([]byte("derived\x00"))
	for i := range c.Backends {
		for _, k := range c.Backends[i].Keys {
			h.Write([]byte(c.Backends[i].Name + "\x00" + k.ID + "\x00" + k.Secret.Value() + "\x00"))
		}
	}
	return h.Sum(nil)
}

// StaticHeader reports whether some backend sets the (lower-case) header
// name as a static header. An upstream attempt removes those its own
// backend does not set: the header map it works on may carry another
// backend's from an earlier attempt.
func (c *Config) StaticHeader(lower string) bool { return c.index.static[lower] }

// SetsHeader reports whether the backend sets the (lower-case) header.
func (b *Backend) SetsHeader(lower string) bool {
	for h := range b.Headers {
		if strings.EqualFold(h, lower) {
			return true
		}
	}
	return false
}

// TargetBackends is the model's target backends in config order, joined
// with commas (computed once: the data path passes it on per request).
func (c *Config) TargetBackends(model string) string { return c.index.joined[model] }
