package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
)

// validateSecurity checks security.* and, for a config read from a file
// (the one whose listen addresses this process binds), that no listener is
// reachable from the network without TLS (unless the operator opted in for
// a mesh) or without authenticating its callers (validatePeerAuthentication).
// A config rebuilt from xDS on an ext_proc replica skips that part: the
// replica's listeners follow its own file.
func (c *Config) validateSecurity(v *validator) {
	s := &c.Security
	s.baseDir = v.opts.BaseDir
	// Certificate files are read here only when secrets are resolved: a
	// config checked on a machine without them (validate --skip-secrets, a
	// control plane) is still checked for form.
	read := !v.opts.SkipSecrets
	pair := func(path, cert, key string) {
		switch {
		case cert == "" && key == "":
		case cert == "" || key == "":
			v.add(path, "cert_file and key_file go together")
		case read:
			if _, err := tls.LoadX509KeyPair(s.path(cert), s.path(key)); err != nil {
				v.add(path+".cert_file", "%v", unwrapPathError(err))
			}
		}
	}
	caFile := func(path, f string) {
		if f == "" || !read {
			return
		}
		b, err := os.ReadFile(s.path(f))
		if err != nil {
			v.add(path, "%v", unwrapPathError(err))
			return
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			v.add(path, "no PEM certificate in %s", f)
		}
	}
	pair("security.tls", s.TLS.CertFile, s.TLS.KeyFile)
	caFile("security.tls.client_ca_file", s.TLS.ClientCAFile)
	caFile("security.tls.ca_file", s.TLS.CAFile)
	if _, _, _, ok := s.ClientTLS(); ok && s.TLS.CertFile == "" {
		v.add("security.tls.cert_file", "required with a CA: swarmgate's own clients present it to each other's listeners")
	}

	for _, l := range []struct {
		name, listen string
		ls           *ListenerSecurity
	}{
		{ListenerXDS, c.Listen.XDS, &s.XDS}, {ListenerExtProc, c.Listen.ExtProc, &s.ExtProc},
		{ListenerRateLimit, c.Listen.RateLimit, &s.RateLimit},
	} {
		path := "security." + l.name
		eff := s.Listener(l.name)
		if l.ls.InsecurePlaintext && (l.ls.CertFile != "" || l.ls.ClientCAFile != "") {
			v.add(path+".insecure_plaintext", "contradicts the listener's own cert_file/client_ca_file")
		}
		pair(path, l.ls.CertFile, l.ls.KeyFile)
		caFile(path+".client_ca_file", l.ls.ClientCAFile)
		if !eff.TLS() && eff.ClientCAFile != "" && !l.ls.InsecurePlaintext {
			v.add(path+".client_ca_file", "needs a server certificate (cert_file)")
		}
		for i, id := range l.ls.AllowedIdentities {
			if !validIdentity(id) {
				v.add(fmt.Sprintf("%s.allowed_identities[%d]", path, i), "invalid identity %q: want a URI SAN (spiffe://trust-domain/path) or a DNS name", id)
			}
		}
		if len(l.ls.AllowedIdentities) > 0 && !eff.Mutual() {
			v.add(path+".allowed_identities", "needs mutual TLS: set client_ca_file (here or in security.tls) and a certificate")
		}
		if l.ls.ServerIdentity != "" && !validIdentity(l.ls.ServerIdentity) {
			v.add(path+".server_identity", "invalid identity %q: want a URI SAN (spiffe://trust-domain/path) or a DNS name", l.ls.ServerIdentity)
		}
		if l.name != ListenerXDS && len(l.ls.NodeGroups) > 0 {
			v.add(path+".node_groups", "only security.xds has node groups")
		}
		if v.opts.checkListeners && !eff.TLS() && !eff.InsecurePlaintext && !IsLoopback(l.listen) {
			v.add("listen."+l.name, "%s is not a loopback address and the listener has no TLS: set security.tls (or security.%s.cert_file), or security.%s.insecure_plaintext: true only behind a mesh that provides mutual TLS",
				l.listen, l.name, l.name)
		}
	}
	if v.opts.checkListeners {
		c.validatePeerAuthentication(v)
	}
	for i, g := range s.XDS.NodeGroups {
		p := fmt.Sprintf("security.xds.node_groups[%d]", i)
		if !validIdentity(g.Identity) {
			v.add(p+".identity", "invalid identity %q", g.Identity)
		}
		if len(g.Groups) == 0 {
			v.add(p+".groups", "required: some of envoy, extproc, ratelimit")
		}
		for j, name := range g.Groups {
			if !slices.Contains([]string{GroupEnvoy, GroupExtProc, GroupRateLimit}, name) {
				v.add(fmt.Sprintf("%s.groups[%d]", p, j), "unknown node group %q: want envoy, extproc or ratelimit", name)
			}
		}
	}
	if len(s.XDS.NodeGroups) > 0 && !s.Listener(ListenerXDS).Mutual() {
		v.add("security.xds.node_groups", "needs mutual TLS on the xDS listener: node groups are granted to client certificate identities")
	}

	// The fleet secret is resolved even when provider keys are skipped: the
	// control plane hands it to Envoy and ext_proc checks it. A reference
	// that does not resolve under SkipSecrets is only checked for form.
	for _, f := range []namedValue[*Secret]{{"security.fleet_secret", &s.FleetSecret}, {"security.previous_fleet_secret", &s.PreviousFleetSecret}} {
		v.fleetSecret(f.path, f.val)
	}
	if !s.PreviousFleetSecret.IsZero() && s.FleetSecret.IsZero() {
		v.add("security.previous_fleet_secret", "only meaningful next to security.fleet_secret (a rotation in progress)")
	}
	ep := s.Listener(ListenerExtProc)
	if v.opts.checkListeners && !IsLoopback(c.Listen.ExtProc) && s.FleetSecret.IsZero() &&
		!(ep.Mutual() && len(ep.AllowedIdentities) > 0) {
		v.add("security.fleet_secret", "required: listen.extproc is not on loopback and security.extproc has no allowed_identities, so nothing would prove that a stream comes from the Envoy fleet (any caller could claim the upstream role and receive provider keys)")
	}
	if e := s.Envoy; (e.CertFile == "") != (e.KeyFile == "") {
		v.add("security.envoy", "cert_file and key_file go together")
	} else if e.CertFile != "" && e.CAFile == "" {
		v.add("security.envoy.ca_file", "required with a client certificate: Envoy must verify swarmgate's servers")
	}
}

// validatePeerAuthentication refuses a listener off loopback that would
// serve a caller it cannot tell from any other (docs/security.md: every
// listener off loopback authenticates its peers). TLS alone proves the
// server to the client, not the client to the server:
//
//   - xDS needs mutual TLS and node_groups. It hands out the fleet secret
//     (LDS, to Envoy) and every virtual-key hash (GatewayConfig, to
//     ext_proc); a client certificate alone proves only that the CA signed
//     it (with a mesh-wide or SPIFFE CA, every workload), and even an
//     allow-listed Envoy could subscribe as ext_proc. Node groups tie each
//     identity to the groups it may subscribe as and refuse any identity
//     without a grant, so they are the allow-list too.
//   - The rate-limit service needs mutual TLS and allowed_identities (the
//     Envoy fleet and ext_proc): whoever reaches it spends tenants' windows.
//   - The admin HTTP server has no TLS: it needs admin.token, at least 16
//     characters when this process resolves it. /healthz and /readyz stay
//     open for the kubelet.
//
// ext_proc's rule (allowed_identities under mutual TLS, or the fleet
// secret) is in validateSecurity. A gRPC listener without TLS is reported
// there (listen.*), and insecure_plaintext is the operator's statement that
// a mesh authenticates pod to pod: neither is reported again here.
func (c *Config) validatePeerAuthentication(v *validator) {
	s := &c.Security
	if l := s.Listener(ListenerXDS); !IsLoopback(c.Listen.XDS) && l.TLS() {
		switch {
		case !l.Mutual():
			v.add("security.xds.client_ca_file", "required: listen.xds %s is not a loopback address and the listener asks for no client certificate, so anything that reaches it could subscribe as Envoy (routes, the fleet secret) or as ext_proc (every virtual-key hash): set security.tls.client_ca_file (or security.xds.client_ca_file) and security.xds.node_groups",
				c.Listen.XDS)
		case len(l.NodeGroups) == 0:
			v.add("security.xds.node_groups", "required: listen.xds %s is not a loopback address, and without node groups any certificate the client CA signed may subscribe as any node group (an Envoy could read ext_proc's GatewayConfig with every virtual-key hash): grant each client identity its groups (envoy, extproc, ratelimit)",
				c.Listen.XDS)
		}
	}
	if l := s.Listener(ListenerRateLimit); !IsLoopback(c.Listen.RateLimit) && l.TLS() {
		switch {
		case !l.Mutual():
			v.add("security.ratelimit.client_ca_file", "required: listen.ratelimit %s is not a loopback address and the listener asks for no client certificate, so anything that reaches it could spend tenants' rate-limit windows: set security.tls.client_ca_file (or security.ratelimit.client_ca_file) and security.ratelimit.allowed_identities",
				c.Listen.RateLimit)
		case len(l.AllowedIdentities) == 0:
			v.add("security.ratelimit.allowed_identities", "required: listen.ratelimit %s is not a loopback address, and without an allow-list any certificate the client CA signed may spend tenants' rate-limit windows: list the identities of the Envoy fleet and of ext_proc",
				c.Listen.RateLimit)
		}
	}
	if !IsLoopback(c.Listen.Admin) {
		tok := c.Admin.Token
		switch {
		case tok.IsZero():
			v.add("admin.token", "required: listen.admin %s is not a loopback address, and without a token anything that reaches it reads tenants, key ids, spend and the config: set admin.token (env:SWARMGATE_ADMIN_TOKEN or file:PATH); /healthz and /readyz stay open for probes",
				c.Listen.Admin)
		case tok.Value() == "" && v.opts.SkipSecrets && !v.opts.ResolveAdminToken:
			// This process does not resolve it: validateAdmin checks its form.
		case tok.Value() != "" || tok.resolve(v.opts.LookupEnv, v.opts.BaseDir) == nil:
			// tok is a copy: validateAdmin resolves the token itself and
			// reports a reference that does not resolve.
			if len(tok.Value()) < 16 {
				v.add("admin.token", "resolves to fewer than 16 characters: too easy to guess for an admin port off loopback (listen.admin %s)", c.Listen.Admin)
			}
		}
	}
}

// fleetSecret resolves a fleet secret even when provider keys are skipped:
// the control plane hands it to Envoy and ext_proc checks it. A reference
// that does not resolve under SkipSecrets is only checked for form.
func (v *validator) fleetSecret(path string, s *Secret) {
	if s.IsZero() || s.Value() != "" {
		return
	}
	if err := s.resolve(v.opts.LookupEnv, v.opts.BaseDir); err != nil {
		if !v.opts.SkipSecrets {
			v.add(path, "%v", err)
		} else if err := s.checkRef(); err != nil {
			v.add(path, "%v", err)
		}
		return
	}
	if len(s.Value()) < 16 {
		v.add(path, "resolves to fewer than 16 characters: too easy to guess")
	}
}
