package config

import (
	"strings"
	"testing"
)

// securityEnv resolves every env: reference of the default config and the
// fleet secret.
func securityEnv(k string) (string, bool) {
	if k == "FLEET" {
		return "fleet-secret-0123456789", true
	}
	if k == "SHORT" {
		return "short", true
	}
	return "sk-test-value", true
}

func TestSecurityValidation(t *testing.T) {
	base := string(DefaultYAML())
	tests := []struct {
		name   string
		listen string // replaces the listen block's extproc line
		extra  string // appended at top level
		want   []string
	}{
		{name: "loopback plaintext is the default", listen: "127.0.0.1:18001"},
		{name: "localhost is loopback", listen: "localhost:18001"},
		{name: "non-loopback plaintext refused", listen: "0.0.0.0:18001",
			want: []string{"listen.extproc: 0.0.0.0:18001 is not a loopback address and the listener has no TLS", "security.fleet_secret: required"}},
		{name: "all interfaces refused", listen: ":18001", want: []string{"listen.extproc: :18001 is not a loopback"}},
		{name: "opt-in plaintext needs the fleet secret", listen: "0.0.0.0:18001",
			extra: "security:\n  extproc: {insecure_plaintext: true}\n", want: []string{"security.fleet_secret: required"}},
		{name: "opt-in plaintext with fleet secret", listen: "0.0.0.0:18001",
			extra: "security:\n  extproc: {insecure_plaintext: true}\n  fleet_secret: env:FLEET\n"},
		{name: "short fleet secret", extra: "security:\n  fleet_secret: env:SHORT\n", want: []string{"security.fleet_secret: resolves to fewer than 16"}},
		{name: "inline fleet secret", extra: "security:\n  fleet_secret: hunter2hunter2hunter2\n", want: []string{"security.fleet_secret: must be a reference"}},
		{name: "mutual TLS with allow-list", listen: "0.0.0.0:18001",
			extra: "security:\n  tls: {cert_file: testdata/tls/tls.crt, key_file: testdata/tls/tls.key, client_ca_file: testdata/tls/ca.crt}\n  extproc: {allowed_identities: [spiffe://example.internal/envoy]}\n"},
		{name: "TLS without identities needs the fleet secret", listen: "0.0.0.0:18001",
			extra: "security:\n  tls: {cert_file: testdata/tls/tls.crt, key_file: testdata/tls/tls.key}\n", want: []string{"security.fleet_secret: required"}},
		{name: "allow-list needs mutual TLS",
			extra: "security:\n  extproc: {allowed_identities: [envoy.internal]}\n", want: []string{"security.extproc.allowed_identities: needs mutual TLS"}},
		{name: "bad identity",
			extra: "security:\n  tls: {cert_file: testdata/tls/tls.crt, key_file: testdata/tls/tls.key, client_ca_file: testdata/tls/ca.crt}\n  extproc: {allowed_identities: [\"spiffe:/x\"]}\n",
			want:  []string{"security.extproc.allowed_identities[0]: invalid identity"}},
		{name: "missing key", extra: "security:\n  tls: {cert_file: testdata/tls/tls.crt}\n", want: []string{"security.tls: cert_file and key_file go together"}},
		{name: "missing file", extra: "security:\n  tls: {cert_file: testdata/tls/nope.crt, key_file: testdata/tls/tls.key}\n", want: []string{"security.tls.cert_file:", "no such file"}},
		{name: "node groups need mutual TLS",
			extra: "security:\n  xds: {node_groups: [{identity: spiffe://x.internal/envoy, groups: [envoy]}]}\n", want: []string{"security.xds.node_groups: needs mutual TLS"}},
		{name: "unknown node group",
			extra: "security:\n  tls: {cert_file: testdata/tls/tls.crt, key_file: testdata/tls/tls.key, client_ca_file: testdata/tls/ca.crt}\n  xds: {node_groups: [{identity: spiffe://x.internal/envoy, groups: [admin]}]}\n",
			want:  []string{"security.xds.node_groups[0].groups[0]: unknown node group \"admin\""}},
		{name: "node groups only on xds",
			extra: "security:\n  ratelimit: {node_groups: [{identity: spiffe://x.internal/envoy, groups: [envoy]}]}\n", want: []string{"security.ratelimit.node_groups: only security.xds"}},
		{name: "plaintext contradiction",
			extra: "security:\n  xds: {insecure_plaintext: true, cert_file: testdata/tls/tls.crt, key_file: testdata/tls/tls.key}\n", want: []string{"security.xds.insecure_plaintext: contradicts"}},
		{name: "envoy client cert needs a CA", extra: "security:\n  envoy: {cert_file: /e/tls.crt, key_file: /e/tls.key}\n", want: []string{"security.envoy.ca_file: required"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := base
			if tt.listen != "" {
				y = strings.Replace(y, "extproc: 127.0.0.1:18001", "extproc: \""+tt.listen+"\"", 1)
			}
			y += tt.extra
			_, err := Parse([]byte(y), "gateway.yaml", Options{LookupEnv: securityEnv, BaseDir: "."})
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "gateway.yaml:") {
				t.Errorf("error %q lacks file:line", err)
			}
			if strings.Contains(err.Error(), "fleet-secret-0123456789") {
				t.Error("error contains the fleet secret")
			}
		})
	}
}

func TestListenerCheckOnlyForFiles(t *testing.T) {
	// A config rebuilt in code (an ext_proc replica's copy from xDS) names
	// the control plane's addresses, not what this process binds.
	c, err := Parse(DefaultYAML(), "default", Options{SkipSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	c.Listen.ExtProc = "0.0.0.0:18001"
	c.Listen.XDS, c.Listen.RateLimit, c.Listen.Admin = "0.0.0.0:18000", "0.0.0.0:18002", "0.0.0.0:19000"
	if err := c.Prepare(Options{SkipSecrets: true}); err != nil {
		t.Fatal(err)
	}
}

func TestListenerEffectivePolicy(t *testing.T) {
	s := Security{TLS: TLSFiles{CertFile: "a.crt", KeyFile: "a.key", ClientCAFile: "ca.crt"},
		XDS: ListenerSecurity{CertFile: "x.crt", KeyFile: "x.key"}, RateLimit: ListenerSecurity{InsecurePlaintext: true}, baseDir: "/etc/sg"}
	if l := s.Listener(ListenerXDS); l.CertFile != "/etc/sg/x.crt" || l.ClientCAFile != "/etc/sg/ca.crt" || !l.Mutual() {
		t.Errorf("xds %+v", l)
	}
	if l := s.Listener(ListenerRateLimit); l.TLS() {
		t.Errorf("insecure_plaintext listener has TLS: %+v", l)
	}
	if l := s.Listener(ListenerExtProc); l.CertFile != "/etc/sg/a.crt" || !l.Mutual() {
		t.Errorf("extproc %+v", l)
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true, "0.0.0.0:1": false, ":1": false, "10.0.0.1:1": false, "[::]:1": false} {
		if IsLoopback(addr) != want {
			t.Errorf("IsLoopback(%q) = %v", addr, !want)
		}
	}
}

// TestListenersOffLoopbackAuthenticatePeers: every listener off loopback
// authenticates its callers (docs/security.md). TLS alone is not enough on
// xDS (mutual TLS and node_groups) and on the rate-limit service (mutual
// TLS and allowed_identities); the admin listener needs admin.token.
// Loopback binds, and the mesh opt-in (insecure_plaintext), stay accepted.
func TestListenersOffLoopbackAuthenticatePeers(t *testing.T) {
	const (
		tlsOnly = "  tls: {cert_file: testdata/tls/tls.crt, key_file: testdata/tls/tls.key}\n"
		mutual  = "  tls: {cert_file: testdata/tls/tls.crt, key_file: testdata/tls/tls.key, client_ca_file: testdata/tls/ca.crt}\n"
		groups  = "  xds: {node_groups: [{identity: spiffe://example.internal/envoy, groups: [envoy]}, {identity: spiffe://example.internal/swarmgate, groups: [extproc, ratelimit]}]}\n"
		rlIDs   = "  ratelimit: {allowed_identities: [spiffe://example.internal/envoy, spiffe://example.internal/swarmgate]}\n"
		token   = "admin: {token: env:ADMIN_TOKEN}\n"
	)
	env := map[string]string{"ADMIN_TOKEN": "admin-token-0123456789", "SHORT_TOKEN": "REPLACE_ME"}
	lookup := func(k string) (string, bool) {
		if v, ok := env[k]; ok {
			return v, true
		}
		return "sk-test-value", true // the default config's upstream keys
	}
	none := func(string) (string, bool) { return "", false }
	resolve := Options{LookupEnv: lookup, BaseDir: "."}
	tests := []struct {
		name                  string
		xds, ratelimit, admin string // listen addresses; "" keeps the default (loopback)
		security, extra       string // security block lines; other top-level YAML
		opts                  *Options
		want, wantNot         []string
	}{
		// Loopback stays as it was: the embedded default needs nothing.
		{name: "default config on loopback"},
		{name: "localhost and ::1 are loopback", xds: "localhost:18000", ratelimit: "[::1]:18002", admin: "localhost:19000"},
		{name: "loopback TLS without client CA", xds: "127.0.0.1:18000", ratelimit: "127.0.0.1:18002", security: tlsOnly},

		// xDS.
		{name: "xds: server TLS only (the reported repro, with ratelimit)", xds: "0.0.0.0:18000", ratelimit: "0.0.0.0:18002", security: tlsOnly,
			want: []string{"security.xds.client_ca_file: required: listen.xds 0.0.0.0:18000 is not a loopback address and the listener asks for no client certificate",
				"security.ratelimit.client_ca_file: required: listen.ratelimit 0.0.0.0:18002 is not a loopback address"}},
		{name: "xds: mutual TLS without node groups", xds: "0.0.0.0:18000", security: mutual,
			want: []string{"security.xds.node_groups: required: listen.xds 0.0.0.0:18000 is not a loopback address"}},
		{name: "xds: an allow-list is not node groups", xds: "0.0.0.0:18000",
			security: mutual + "  xds: {allowed_identities: [spiffe://example.internal/envoy]}\n",
			want:     []string{"security.xds.node_groups: required"}},
		{name: "xds: all interfaces, IPv6", xds: "[::]:18000", security: tlsOnly, want: []string{"security.xds.client_ca_file: required: listen.xds [::]:18000"}},
		{name: "xds: plaintext reports the missing TLS, once", xds: "0.0.0.0:18000",
			want: []string{"listen.xds: 0.0.0.0:18000 is not a loopback address and the listener has no TLS"}, wantNot: []string{"security.xds.client_ca_file", "security.xds.node_groups"}},
		{name: "xds: mutual TLS with node groups", xds: "0.0.0.0:18000", security: mutual + groups},
		{name: "xds: the listener's own client CA", xds: "10.0.0.7:18000",
			security: tlsOnly + "  xds: {client_ca_file: testdata/tls/ca.crt, node_groups: [{identity: spiffe://example.internal/envoy, groups: [envoy]}]}\n"},
		{name: "xds: mesh opt-in", xds: "0.0.0.0:18000", security: "  xds: {insecure_plaintext: true}\n"},

		// Rate-limit service.
		{name: "ratelimit: server TLS only", ratelimit: ":18002", security: tlsOnly,
			want: []string{"security.ratelimit.client_ca_file: required: listen.ratelimit :18002 is not a loopback address", "spend tenants' rate-limit windows"}},
		{name: "ratelimit: mutual TLS without an allow-list", ratelimit: "0.0.0.0:18002", security: mutual,
			want: []string{"security.ratelimit.allowed_identities: required: listen.ratelimit 0.0.0.0:18002 is not a loopback address"}},
		{name: "ratelimit: plaintext reports the missing TLS, once", ratelimit: "0.0.0.0:18002",
			want: []string{"listen.ratelimit: 0.0.0.0:18002 is not a loopback address"}, wantNot: []string{"security.ratelimit.client_ca_file"}},
		{name: "ratelimit: mutual TLS with an allow-list", ratelimit: "0.0.0.0:18002", security: mutual + rlIDs},
		{name: "ratelimit: mesh opt-in", ratelimit: "0.0.0.0:18002", security: "  ratelimit: {insecure_plaintext: true}\n"},

		// Admin.
		{name: "admin: no token", admin: "0.0.0.0:19000",
			want: []string{"admin.token: required: listen.admin 0.0.0.0:19000 is not a loopback address"}},
		{name: "admin: all interfaces", admin: ":19000", want: []string{"admin.token: required: listen.admin :19000"}},
		{name: "admin: a pod IP", admin: "10.0.3.7:19000", want: []string{"admin.token: required"}},
		{name: "admin: the mesh opt-in of the gRPC listeners does not cover it", admin: "0.0.0.0:19000",
			security: "  xds: {insecure_plaintext: true}\n  ratelimit: {insecure_plaintext: true}\n", want: []string{"admin.token: required"}},
		{name: "admin: token", admin: "0.0.0.0:19000", extra: token},
		{name: "admin: short token", admin: "0.0.0.0:19000", extra: "admin: {token: env:SHORT_TOKEN}\n",
			want: []string{"admin.token: resolves to fewer than 16 characters"}, wantNot: []string{"REPLACE_ME"}},
		{name: "admin: short token, control plane (resolves only the admin token)", admin: "0.0.0.0:19000", extra: "admin: {token: env:SHORT_TOKEN}\n",
			opts: &Options{LookupEnv: lookup, SkipSecrets: true, ResolveAdminToken: true}, want: []string{"admin.token: resolves to fewer than 16 characters"}},
		{name: "admin: unresolved token under --skip-secrets is checked for form only", admin: "0.0.0.0:19000", extra: token,
			opts: &Options{LookupEnv: none, SkipSecrets: true}},
		{name: "admin: no token under --skip-secrets", admin: "0.0.0.0:19000",
			opts: &Options{LookupEnv: none, SkipSecrets: true}, want: []string{"admin.token: required"}},
		{name: "admin: a token that does not resolve is reported once", admin: "0.0.0.0:19000", extra: "admin: {token: env:NOPE}\n",
			opts: &Options{LookupEnv: none, SkipSecrets: true, ResolveAdminToken: true}, want: []string{"admin.token: environment variable NOPE is not set"},
			wantNot: []string{"fewer than 16"}},
		{name: "admin: loopback needs no token", admin: "127.0.0.1:19000"},

		// Everything off loopback, authenticated (deploy/kubernetes).
		{name: "every listener off loopback, authenticated", xds: "0.0.0.0:18000", ratelimit: "0.0.0.0:18002", admin: "0.0.0.0:19000",
			security: mutual + groups + rlIDs, extra: token},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := string(DefaultYAML())
			for _, r := range []struct{ from, to string }{
				{"xds: 127.0.0.1:18000", tt.xds}, {"ratelimit: 127.0.0.1:18002", tt.ratelimit}, {"admin: 127.0.0.1:19000", tt.admin},
			} {
				if r.to != "" {
					name, _, _ := strings.Cut(r.from, ":")
					y = strings.Replace(y, r.from, name+": \""+r.to+"\"", 1)
				}
			}
			if tt.security != "" {
				y += "security:\n" + tt.security
			}
			y += tt.extra
			opts := resolve
			if tt.opts != nil {
				opts = *tt.opts
				opts.BaseDir = "."
			}
			_, err := Parse([]byte(y), "gateway.yaml", opts)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nhas %q", err, w)
				}
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "gateway.yaml:") {
					t.Errorf("error line %q lacks file:line", line)
				}
			}
			if strings.Contains(err.Error(), env["ADMIN_TOKEN"]) {
				t.Error("error contains the admin token")
			}
		})
	}
}
