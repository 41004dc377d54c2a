package translator

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// SecureServiceCluster gives a cluster to one of swarmgate's listeners
// (config.ListenerXDS, ListenerExtProc, ListenerRateLimit) the transport
// socket of security.envoy: TLS with Envoy's client certificate, the CA that
// verifies swarmgate, and a SAN match on the listener's server_identity.
// Without security.envoy.ca_file the cluster stays plaintext.
func SecureServiceCluster(c *clusterv3.Cluster, sec *config.Security, listener string) {
	e := sec.Envoy
	if !e.Enabled() {
		return
	}
	id := sec.Listener(listener).ServerIdentity
	vc := &tlsv3.CertificateValidationContext{
		TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: e.CAFile}},
		// Re-read the CA when a Kubernetes secret volume swaps it.
		WatchedDirectory: &corev3.WatchedDirectory{Path: filepath.Dir(e.CAFile)},
	}
	if id != "" {
		typ := tlsv3.SubjectAltNameMatcher_DNS
		if config.IdentityIsURI(id) {
			typ = tlsv3.SubjectAltNameMatcher_URI
		}
		vc.MatchTypedSubjectAltNames = []*tlsv3.SubjectAltNameMatcher{{
			SanType: typ, Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: id}},
		}}
	}
	// grpc-go servers require ALPN h2.
	common := &tlsv3.CommonTlsContext{AlpnProtocols: []string{"h2"},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}}
	if e.CertFile != "" {
		common.TlsCertificates = []*tlsv3.TlsCertificate{{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: e.CertFile}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: e.KeyFile}},
			// A rotated certificate is picked up without restarting Envoy.
			WatchedDirectory: &corev3.WatchedDirectory{Path: filepath.Dir(e.CertFile)},
		}}
	}
	ctx := &tlsv3.UpstreamTlsContext{CommonTlsContext: common}
	// SNI: the DNS identity, else the host name dialled (not an IP).
	if id != "" && !config.IdentityIsURI(id) {
		ctx.Sni = id
	} else if h := serviceHost(c); h != "" && net.ParseIP(h) == nil {
		ctx.Sni = h
	}
	c.TransportSocket = &corev3.TransportSocket{
		Name:       "envoy.transport_sockets.tls",
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)},
	}
}

func serviceHost(c *clusterv3.Cluster) string {
	for _, l := range c.GetLoadAssignment().GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			return e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
		}
	}
	return ""
}

// fleetSecret is the value Envoy must send to ext_proc, "" when none is
// configured; an unresolved reference is an error (Envoy would be refused).
func fleetSecret(sec *config.Security) (string, error) {
	if sec.FleetSecret.IsZero() {
		return "", nil
	}
	if v := sec.FleetSecret.Value(); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("security.fleet_secret %s is not resolved: Envoy needs its value", sec.FleetSecret.Ref())
}

// withFleetSecret adds the fleet secret to the initial metadata of every
// ext_proc filter of the listener (router level) and of the pool clusters
// (upstream, per attempt). It edits the built resources rather than the
// filter builders, which stay free of secrets: this is the one place a
// secret enters generated configuration, and only Envoy's.
func withFleetSecret(r *Resources, secret string) error {
	if secret == "" {
		return nil
	}
	for _, l := range r.Listeners {
		if err := listenerFleetSecret(l, secret); err != nil {
			return err
		}
	}
	for _, c := range r.Clusters {
		if err := ClusterFleetSecret(c, secret); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
	}
	return nil
}

func listenerFleetSecret(l *listenerv3.Listener, secret string) error {
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			if f.GetTypedConfig() == nil {
				continue
			}
			hcm := &hcmv3.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
				continue // not an HCM
			}
			if err := HCMFleetSecret(hcm, secret); err != nil {
				return err
			}
			f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)}
		}
	}
	return nil
}

// HCMFleetSecret adds the fleet secret to the HCM's ext_proc filters.
func HCMFleetSecret(hcm *hcmv3.HttpConnectionManager, secret string) error {
	_, err := filtersFleetSecret(hcm.GetHttpFilters(), secret)
	return err
}

// filtersFleetSecret adds the secret to the initial metadata of every
// ext_proc filter among filters; it reports whether there was one.
func filtersFleetSecret(filters []*hcmv3.HttpFilter, secret string) (bool, error) {
	found := false
	for _, hf := range filters {
		if hf.GetName() != FilterExtProc {
			continue
		}
		ep := &extprocv3.ExternalProcessor{}
		if err := hf.GetTypedConfig().UnmarshalTo(ep); err != nil {
			return found, err
		}
		addSecretMetadata(ep.GetGrpcService(), secret)
		hf.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(ep)}
		found = true
	}
	return found, nil
}

// ClusterFleetSecret adds the fleet secret to a cluster's upstream ext_proc
// filter, if it has one.
func ClusterFleetSecret(c *clusterv3.Cluster, secret string) error {
	a := c.GetTypedExtensionProtocolOptions()[HTTPOptionsKey]
	if a == nil {
		return nil
	}
	opts := &httpv3.HttpProtocolOptions{}
	if err := a.UnmarshalTo(opts); err != nil {
		return err
	}
	found, err := filtersFleetSecret(opts.GetHttpFilters(), secret)
	if err != nil {
		return err
	}
	if found {
		c.TypedExtensionProtocolOptions[HTTPOptionsKey] = mustAny(opts)
	}
	return nil
}

var errNoGRPCService = errors.New("ext_proc filter without grpc_service")

func addSecretMetadata(g *corev3.GrpcService, secret string) {
	if g == nil {
		panic(errNoGRPCService) // the builders always set one
	}
	for _, h := range g.InitialMetadata {
		if h.Key == contract.GRPCFleetSecretHeader {
			h.Value = secret
			return
		}
	}
	g.InitialMetadata = append(g.InitialMetadata, &corev3.HeaderValue{Key: contract.GRPCFleetSecretHeader, Value: secret})
}
