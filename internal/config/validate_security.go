package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
)

// validateSecurity checks security.* and, for a config read from a file
// (the one whose listen addresses this process binds), that no gRPC
// listener is reachable from the network without TLS unless the operator
// opted in. A config rebuilt from xDS on an ext_proc replica skips that
// part: the replica's listeners follow its own file.
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
