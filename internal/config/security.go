package config

import (
	"net"
	"net/url"
	"path/filepath"
	"strings"
)

// Security says how swarmgate's gRPC listeners (xDS, ext_proc, rate-limit
// service) authenticate their callers, how swarmgate's own processes
// authenticate to each other, and what the generated Envoy configuration
// presents. It is local to each process (certificate paths are paths on
// that machine): it is not part of the GatewayConfig the control plane sends
// to ext_proc replicas, which keep the security of their own file.
//
// A listener serves TLS when it has a certificate (its own cert_file or
// security.tls.cert_file) and mutual TLS when it also has a client CA.
type Security struct {
	// TLS is the default of every listener and the identity swarmgate's
	// own clients present (ext_proc → xDS and rate-limit service, rate-limit
	// service → xDS).
	TLS       TLSFiles         `yaml:"tls" json:"tls"`
	XDS       ListenerSecurity `yaml:"xds" json:"xds"`
	ExtProc   ListenerSecurity `yaml:"extproc" json:"extproc"`
	RateLimit ListenerSecurity `yaml:"ratelimit" json:"ratelimit"`
	// FleetSecret is the shared secret Envoy sends to ext_proc in gRPC
	// initial metadata (contract.GRPCFleetSecretHeader) when the ext_proc
	// listener cannot tell Envoy by its client certificate (plaintext
	// behind a mesh, or TLS without client identities).
	FleetSecret Secret `yaml:"fleet_secret" json:"fleet_secret"`
	// PreviousFleetSecret is still accepted by ext_proc while Envoy moves
	// to a new FleetSecret (rotation without downtime); Envoy gets only
	// FleetSecret.
	PreviousFleetSecret Secret `yaml:"previous_fleet_secret" json:"previous_fleet_secret"`
	// Envoy is what the generated Envoy configuration presents and trusts
	// when it connects to swarmgate (paths on the Envoy host).
	Envoy EnvoyTLS `yaml:"envoy" json:"envoy"`

	baseDir string // where relative paths are resolved from (Options.BaseDir)
}

// TLSFiles are PEM files, re-read when they change.
type TLSFiles struct {
	CertFile string `yaml:"cert_file" json:"cert_file"` // certificate chain
	KeyFile  string `yaml:"key_file" json:"key_file"`
	// ClientCAFile verifies client certificates; set, the listener requires
	// one (mutual TLS).
	ClientCAFile string `yaml:"client_ca_file" json:"client_ca_file"`
	// CAFile verifies swarmgate's servers when its own processes dial each
	// other; default ClientCAFile (one mesh CA).
	CAFile string `yaml:"ca_file" json:"ca_file"`
}

// ListenerSecurity is one listener's policy; empty file fields take
// security.tls's.
type ListenerSecurity struct {
	CertFile     string `yaml:"cert_file" json:"cert_file"`
	KeyFile      string `yaml:"key_file" json:"key_file"`
	ClientCAFile string `yaml:"client_ca_file" json:"client_ca_file"`
	// AllowedIdentities are the client identities accepted, exact matches:
	// an entry with "://" (spiffe://…) matches a URI SAN, any other a DNS
	// SAN. Empty: any certificate the client CA signed.
	AllowedIdentities []string `yaml:"allowed_identities" json:"allowed_identities"`
	// ServerIdentity is the identity the listener's certificate carries (URI
	// or DNS SAN, same form); Envoy and swarmgate's clients require it. Empty:
	// clients check the host name they dial.
	ServerIdentity string `yaml:"server_identity" json:"server_identity"`
	// InsecurePlaintext allows a non-loopback address without TLS: only for
	// meshes that already provide mutual TLS (an Istio or Linkerd sidecar).
	InsecurePlaintext bool `yaml:"insecure_plaintext" json:"insecure_plaintext"`
	// NodeGroups (security.xds only) maps client identities to the xDS node
	// groups they may subscribe as.
	NodeGroups []NodeGroupGrant `yaml:"node_groups" json:"node_groups"`
}

// NodeGroupGrant lets one client identity subscribe as some node groups.
type NodeGroupGrant struct {
	Identity string   `yaml:"identity" json:"identity"`
	Groups   []string `yaml:"groups" json:"groups"` // envoy, extproc, ratelimit
}

// Node group names in security.xds.node_groups.
const (
	GroupEnvoy     = "envoy"     // envoy.node_cluster (and Envoys of an existing mesh)
	GroupExtProc   = "extproc"   // ext_proc replicas: GatewayConfig
	GroupRateLimit = "ratelimit" // the rate-limit service: RateLimitConfig
)

// EnvoyTLS is the client side of the generated Envoy configuration: the
// transport_socket of the xDS, ext_proc and rate-limit clusters.
type EnvoyTLS struct {
	CertFile string `yaml:"cert_file" json:"cert_file"`
	KeyFile  string `yaml:"key_file" json:"key_file"`
	CAFile   string `yaml:"ca_file" json:"ca_file"` // verifies swarmgate's servers
}

// Enabled reports whether Envoy is configured to connect with TLS.
func (e EnvoyTLS) Enabled() bool { return e.CAFile != "" }

// ListenerTLS is one listener's effective policy (security.tls merged in).
type ListenerTLS struct {
	CertFile, KeyFile, ClientCAFile string
	AllowedIdentities               []string
	ServerIdentity                  string
	InsecurePlaintext               bool
	NodeGroups                      []NodeGroupGrant
}

// TLS reports whether the listener serves TLS.
func (l ListenerTLS) TLS() bool { return l.CertFile != "" }

// Mutual reports whether the listener requires a client certificate.
func (l ListenerTLS) Mutual() bool { return l.TLS() && l.ClientCAFile != "" }

// Listener names for Security.Listener.
const (
	ListenerXDS       = "xds"
	ListenerExtProc   = "extproc"
	ListenerRateLimit = "ratelimit"
)

// Listener is the effective policy of the named listener (ListenerXDS,
// ListenerExtProc, ListenerRateLimit).
func (s *Security) Listener(name string) ListenerTLS {
	var l *ListenerSecurity
	switch name {
	case ListenerXDS:
		l = &s.XDS
	case ListenerExtProc:
		l = &s.ExtProc
	case ListenerRateLimit:
		l = &s.RateLimit
	default:
		return ListenerTLS{}
	}
	or := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	out := ListenerTLS{
		CertFile: s.path(or(l.CertFile, s.TLS.CertFile)), KeyFile: s.path(or(l.KeyFile, s.TLS.KeyFile)),
		ClientCAFile:      s.path(or(l.ClientCAFile, s.TLS.ClientCAFile)),
		AllowedIdentities: l.AllowedIdentities, ServerIdentity: l.ServerIdentity,
		InsecurePlaintext: l.InsecurePlaintext, NodeGroups: l.NodeGroups,
	}
	if l.InsecurePlaintext {
		out.CertFile, out.KeyFile, out.ClientCAFile = "", "", ""
	}
	return out
}

// ClientTLS is what swarmgate's own clients present and trust: enabled when
// security.tls has a CA to verify servers with.
func (s *Security) ClientTLS() (cert, key, ca string, ok bool) {
	ca = s.TLS.CAFile
	if ca == "" {
		ca = s.TLS.ClientCAFile
	}
	return s.path(s.TLS.CertFile), s.path(s.TLS.KeyFile), s.path(ca), ca != ""
}

// IsLoopback reports whether a listen address binds only the loopback
// interface ("localhost", 127.0.0.0/8, ::1). An empty host binds every
// interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// IdentityIsURI reports whether an identity names a URI SAN (it has a
// scheme, e.g. spiffe://) rather than a DNS SAN.
func IdentityIsURI(id string) bool { return strings.Contains(id, "://") }

func validIdentity(id string) bool {
	if id == "" || strings.ContainsAny(id, " \t\r\n") {
		return false
	}
	if IdentityIsURI(id) {
		u, err := url.Parse(id)
		return err == nil && u.Scheme != "" && u.Host != ""
	}
	return !strings.ContainsAny(id, "/:")
}

// path resolves a certificate path: relative paths are relative to the
// config file's directory, like file: secrets. The config keeps the path as
// written (dumps and round trips show what the operator wrote).
func (s *Security) path(p string) string {
	if p == "" || s.baseDir == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(s.baseDir, p)
}
