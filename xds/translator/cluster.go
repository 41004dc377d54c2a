package translator

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	codecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/xds/ir"
)

// outlierInterval is how often Envoy evaluates ejections.
const outlierInterval = 10 * time.Second

// PoolCluster is the EDS cluster of one pool: one locality per target with
// the target's priority and weight, the upstream ext_proc filter, outlier
// detection and circuit breakers with a retry budget.
func PoolCluster(g *ir.Gateway, p *ir.Pool) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:                 p.Cluster,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads(), ServiceName: p.Cluster},
		ConnectTimeout:       dur(p.ConnectTimeout),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		// Locality load_balancing_weight (the target weight) is honoured only
		// with locality-weighted load balancing.
		// https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/upstream/load_balancing/locality_weight
		CommonLbConfig: &clusterv3.Cluster_CommonLbConfig{
			// Never panic-route: with the default threshold (50 %) a
			// priority whose hosts are mostly UNHEALTHY sends traffic to
			// all of them anyway (load_balancer_impl.cc,
			// recalculatePerPriorityPanic, Envoy 1.38), and an endpoint is
			// pushed UNHEALTHY exactly when it has no usable key. With 0, a
			// pool with no healthy host gets Envoy's "no healthy upstream"
			// 503, which the router-level ext_proc turns into an
			// OpenAI-shaped 503 with Retry-After.
			HealthyPanicThreshold: &typev3.Percent{Value: 0},
			LocalityConfigSpecifier: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
				LocalityWeightedLbConfig: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
			},
		},
		CircuitBreakers:  circuitBreakers(g, p),
		OutlierDetection: outlierDetection(g, p),
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			HTTPOptionsKey: mustAny(upstreamHTTP(g, p)),
		},
	}
	c.TransportSocketMatches = transportSocketMatches(p)
	c.AltStatName = statName(p.Cluster)
	return c
}

// statName is the name a pool cluster's stats go by when its own has dots
// ("" otherwise: the name itself). Envoy's tag extraction takes a cluster
// stat's name up to the first dot (envoy_cluster_name="pool_gpt-4" and a
// metric named cluster_1_upstream_rq for model gpt-4.1), and model names
// are full of dots; underscores stand in for them.
func statName(cluster string) string {
	if !strings.Contains(cluster, ".") {
		return ""
	}
	return strings.ReplaceAll(cluster, ".", "_")
}

// upstreamHTTP: HTTP/1.1 to providers (every OpenAI-compatible API and relay
// speaks it, SSE included), and the per-attempt filter chain, which must end
// with upstream_codec.
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/upstreams/http/v3/http_protocol_options.proto
func upstreamHTTP(g *ir.Gateway, p *ir.Pool) *httpv3.HttpProtocolOptions {
	return &httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{
					HttpProtocolOptions: &corev3.Http1ProtocolOptions{},
				},
			},
		},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: FilterExtProc, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(UpstreamExtProc(g))}},
			{Name: FilterCodec, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&codecv3.UpstreamCodec{})}},
		},
	}
}

// circuitBreakers: the pool's thresholds are sums over its backends (see
// ir.Pool). max_retries is replaced by a retry budget: a 429 storm would
// exhaust the default of 3 concurrent retries at once.
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/cluster/v3/circuit_breaker.proto
func circuitBreakers(g *ir.Gateway, p *ir.Pool) *clusterv3.CircuitBreakers {
	return &clusterv3.CircuitBreakers{
		Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			Priority:           corev3.RoutingPriority_DEFAULT,
			MaxConnections:     u32(p.MaxConnections),
			MaxPendingRequests: u32(p.MaxPendingRequests),
			MaxRequests:        u32(p.MaxRequests),
			RetryBudget: &clusterv3.CircuitBreakers_Thresholds_RetryBudget{
				BudgetPercent:       &typev3.Percent{Value: g.Retry.BudgetPercent},
				MinRetryConcurrency: u32(uint32(max(g.Retry.MinRetryConcurrency, 0))),
			},
		}},
		PerHostThresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			Priority:       corev3.RoutingPriority_DEFAULT,
			MaxConnections: u32(p.MaxConnectionsPerHost),
		}},
	}
}

// outlierDetection ejects a backend host after consecutive 5xx, gateway
// errors or local-origin failures (connect errors, resets). 429 is a success
// to Envoy; the per-key breakers in ext_proc handle it. max_ejection_percent
// is 100 so a pool of one host per priority can still eject it and fail over.
//
// A pool of one target ejects only on local-origin failures (an address
// of its name that cannot be reached, among several): there is no other
// relay to fail over to, and Envoy ejects at least one host whatever
// max_ejection_percent, so a provider's short run of 5xx (or one tenant's
// requests that draw them) took the model out for the whole ejection time
// after the provider had recovered. Its keys' breakers judge its answers.
// https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/upstream/outlier
func outlierDetection(g *ir.Gateway, p *ir.Pool) *clusterv3.OutlierDetection {
	n := u32(uint32(max(g.Breaker.Consecutive5xx, 1)))
	answers := u32(100) // enforcing the 5xx and gateway-failure ejections
	if len(p.Targets) < 2 {
		answers = u32(0)
	}
	return &clusterv3.OutlierDetection{
		Consecutive_5Xx:                        n,
		ConsecutiveGatewayFailure:              n,
		SplitExternalLocalOriginErrors:         true,
		ConsecutiveLocalOriginFailure:          n,
		EnforcingConsecutive_5Xx:               answers,
		EnforcingConsecutiveGatewayFailure:     answers,
		EnforcingConsecutiveLocalOriginFailure: u32(100),
		EnforcingSuccessRate:                   u32(0),
		EnforcingLocalOriginSuccessRate:        u32(0),
		Interval:                               dur(outlierInterval),
		BaseEjectionTime:                       dur(g.Breaker.Cooldown.D()),
		MaxEjectionTime:                        dur(g.Breaker.MaxCooldown.D()),
		MaxEjectionPercent:                     u32(100),
	}
}

// transportSocketMatches gives each HTTPS backend of the pool its own TLS
// context (SNI and verified name) selected by endpoint metadata
// envoy.transport_socket_match {swarmgate_backend: <name>}; endpoints without
// that metadata use the cluster default: plaintext.
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/cluster/v3/cluster.proto#envoy-v3-api-msg-config-cluster-v3-cluster-transportsocketmatch
func transportSocketMatches(p *ir.Pool) []*clusterv3.Cluster_TransportSocketMatch {
	var out []*clusterv3.Cluster_TransportSocketMatch
	seen := map[string]bool{}
	for _, t := range p.Targets {
		if !t.TLS || seen[t.Backend] {
			continue
		}
		seen[t.Backend] = true
		match, _ := structpb.NewStruct(map[string]any{TransportSocketMatchKey: t.Backend})
		out = append(out, &clusterv3.Cluster_TransportSocketMatch{
			Name:            "tls_" + t.Backend,
			Match:           match,
			TransportSocket: UpstreamTLS(t.ServerName, t.CAFile, t.Insecure),
		})
	}
	slices.SortFunc(out, func(a, b *clusterv3.Cluster_TransportSocketMatch) int { return cmpString(a.Name, b.Name) })
	return out
}

// UpstreamTLS is a TLS transport socket presenting serverName as SNI and
// verifying the peer against it (system roots unless caFile is set).
//
// A backend addressed by an IP (https://10.0.0.5:8443/v1, no sni) is
// verified against an IP SAN and sends no SNI (RFC 6066 allows host names
// only): a DNS SAN matcher never matches a certificate's IP SAN (Envoy's
// DnsExactStringSanMatcher reads DNS SANs only), so every handshake failed.
func UpstreamTLS(serverName, caFile string, insecure bool) *corev3.TransportSocket {
	common := &tlsv3.CommonTlsContext{AlpnProtocols: []string{"http/1.1"}}
	sanType, sni := tlsv3.SubjectAltNameMatcher_DNS, serverName
	if ip, err := netip.ParseAddr(strings.Trim(serverName, "[]")); err == nil {
		sanType, sni, serverName = tlsv3.SubjectAltNameMatcher_IP_ADDRESS, "", ip.String()
	}
	if !insecure {
		vc := &tlsv3.CertificateValidationContext{
			MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
				SanType: sanType,
				Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: serverName}},
			}},
		}
		if caFile != "" {
			vc.TrustedCa = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: caFile}}
		} else {
			vc.SystemRootCerts = &tlsv3.CertificateValidationContext_SystemRootCerts{}
		}
		common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
	}
	return &corev3.TransportSocket{
		Name: "envoy.transport_sockets.tls",
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(&tlsv3.UpstreamTlsContext{
			Sni: sni, CommonTlsContext: common,
		})},
	}
}
