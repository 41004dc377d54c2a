package config

import (
	"fmt"
	"net"
	"strings"
)

// Admin secures the admin HTTP API (listen.admin). It is read once at
// startup, like listen.admin: the admin API of an ext_proc replica that
// takes its config over xDS keeps its own file's settings.
type Admin struct {
	// Token, when set, is required as "Authorization: Bearer <token>" on
	// every admin endpoint but /healthz, /readyz and the status page's
	// static files.
	Token Secret `yaml:"token" json:"token"`
	// AllowedHosts are the host names (no port) a request's Host header may
	// carry besides localhost, IP literals and listen.admin's host: a
	// browser tricked by DNS rebinding sends the attacker's name.
	AllowedHosts []string `yaml:"allowed_hosts" json:"allowed_hosts"`
}

func (c *Config) validateAdmin(v *validator) {
	a := &c.Admin
	// A process serving the admin API needs the token even when it goes
	// without upstream keys (the control plane).
	v.secretFor(v.opts.ResolveAdminToken, "admin.token", &a.Token)
	for i, h := range a.AllowedHosts {
		p := fmt.Sprintf("admin.allowed_hosts[%d]", i)
		switch {
		case h == "":
			v.add(p, "must not be empty")
		case strings.ContainsAny(h, "/ \t@*"):
			v.add(p, "invalid host %q: a host name or IP address, no scheme, path or wildcard", h)
		case strings.HasPrefix(h, "[") || net.ParseIP(h) != nil:
			v.add(p, "IP addresses are always allowed; list host names only")
		case strings.Contains(h, ":"):
			v.add(p, "invalid host %q: give the name without a port (any port is accepted)", h)
		}
	}
}
