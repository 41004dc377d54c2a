package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/swarmgate/swarmgate/internal/config"
)

// access decides who may use the admin API. It runs before the routes, in
// this order, so a refused request never reaches a handler:
//
//  1. Host: only localhost, IP literals, listen.admin's host and
//     admin.allowed_hosts (421 otherwise). A page that rebinds its own
//     name to 127.0.0.1 still sends its own name as Host.
//  2. Origin and Sec-Fetch-Site: a browser request from another origin is
//     refused (403), even for GET, so no page can drive the admin API.
//  3. Method: GET and HEAD only (405), but for the key API (/v1/keys),
//     the one part that changes state.
//  4. Token, when admin.token is set: "Authorization: Bearer <token>" on
//     everything but the probes and the status page's files (401). The
//     key API checks its callers itself (subkeys_auth.go): it always needs
//     a credential, the admin token or a minter key, even when admin.token
//     is not set, so an open admin port never changes state.
type access struct {
	hosts map[string]bool
	token config.Secret
	// sum is SHA-256 of the token: comparing fixed-length digests in
	// constant time leaks neither the token nor its length.
	sum [sha256.Size]byte
}

// public paths need no token: the probes (kubelet and load balancers send
// none) and the status page's embedded files, which hold no data (the page
// asks for the token before it polls anything).
func public(path string) bool {
	switch path {
	case "/healthz", "/readyz", "/", "/status":
		return true
	}
	return strings.HasPrefix(path, "/static/")
}

func newAccess(a config.Admin, listenAddr string) *access {
	ac := &access{hosts: map[string]bool{"localhost": true}, token: a.Token}
	if host, _, err := net.SplitHostPort(listenAddr); err == nil && host != "" {
		ac.hosts[normalHost(host)] = true
	}
	for _, h := range a.AllowedHosts {
		ac.hosts[normalHost(h)] = true
	}
	if v := a.Token.Value(); v != "" {
		ac.sum = sha256.Sum256([]byte(v))
	}
	return ac
}

// normalHost lowercases a host name and drops a trailing dot
// ("LocalHost." is localhost).
func normalHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// hostAllowed reports whether a Host header names this server. IP
// literals always pass: DNS rebinding needs a name the attacker controls,
// and probes and scrapers address pods by IP.
func (ac *access) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" {
		return false
	}
	if net.ParseIP(host) != nil {
		return true
	}
	return ac.hosts[normalHost(host)]
}

// sameOrigin reports whether a browser sent the request from this very
// origin (or not from a page at all).
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default: // cross-site, and same-site (another port of localhost is another program)
		return false
	}
	o, ok := r.Header["Origin"]
	if !ok {
		return true
	}
	if len(o) != 1 {
		return false
	}
	u, err := url.Parse(o[0])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false // "null" included: sandboxed frames and file: pages
	}
	return strings.EqualFold(u.Host, r.Host)
}

// tokenOK checks the bearer token in constant time.
func (ac *access) tokenOK(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(got[:], ac.sum[:]) == 1
}

func (s *Server) guard(ac *access, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case !ac.hostAllowed(r.Host):
			s.refuse(w, r, http.StatusMisdirectedRequest, "host not allowed: add it to admin.allowed_hosts")
			return
		case !sameOrigin(r):
			s.refuse(w, r, http.StatusForbidden, "cross-origin requests are refused")
			return
		case r.Method != http.MethodGet && r.Method != http.MethodHead && !keyAPI(r.URL.Path):
			w.Header().Set("Allow", "GET, HEAD")
			s.refuse(w, r, http.StatusMethodNotAllowed, "the admin API is read-only: GET or HEAD")
			return
		}
		if ac.token.IsZero() || public(r.URL.Path) || keyAPI(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		if ac.token.Value() == "" {
			// Configured but not resolved in this process: refuse rather
			// than serve an admin API the operator meant to protect.
			s.refuse(w, r, http.StatusServiceUnavailable, "admin.token is set but was not resolved in this process")
			return
		}
		if !ac.tokenOK(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="swarmgate-admin"`)
			s.refuse(w, r, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refuse answers a refused request with a JSON error and logs why, never
// the Authorization header.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	s.log.Debug("admin: request refused", "status", status, "reason", msg, "method", r.Method,
		"path", r.URL.Path, "host", r.Host, "remote", r.RemoteAddr)
	s.writeJSON(w, status, errorBody{Error: msg})
}
