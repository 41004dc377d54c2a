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
