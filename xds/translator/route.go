package translator

import (
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/xds/ir"
)

// RetryOn is the retry condition of every pool route: 429 (a rate-limited
// key; the upstream ext_proc picks another key on the next attempt), 401
// and 403 (a pooled key the provider refused: revoked or without access;
// the client's own key was checked at admission), 5xx, resets and
// connection failures.
// https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/router_filter#x-envoy-retry-on
// An upstream ext_proc local reply (no usable key) is never retried
// (UpstreamFilterManager::sendLocalReply, Envoy >= 1.36), so no attempt
// has to leave without a credential to be retried.
const RetryOn = "5xx,reset,connect-failure,retriable-status-codes"

// RetriableStatusCodes are retried besides 5xx.
var RetriableStatusCodes = []uint32{401, 403, 429}

// NoRouteHeader names the header whose value the catch-all route looks up
// as a cluster name. Every request has a :path, it always starts with "/",
// and no cluster swarmgate generates does (pools are pool_*, services
// swarmgate_*), so the lookup always fails: the router answers 404 with
// response flag NC, which LocalReplies shapes into the client's family.
// A client cannot steer it to a cluster, unlike a header of its own.
const NoRouteHeader = ":path"

// ProviderHiddenHeaders never reach a provider: the client's address as
// the HCM records it (x-forwarded-for, x-envoy-external-address with
// use_remote_address) or as the client or a proxy in front claims it, and
// how Envoy was reached. Removed by the router
// (RouteEntryImplBase::finalizeRequestHeaders, before the upstream filters
// run), after ext_proc and the rate-limit filter have seen them. The
// router's own x-envoy-* headers are stopped by suppress_envoy_headers
// (Router).
var ProviderHiddenHeaders = []string{
	"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-forwarded-port", "forwarded", "via",
	"x-real-ip", "true-client-ip", "x-client-ip", "x-cluster-client-ip", "cf-connecting-ip",
	"x-envoy-external-address", "x-envoy-original-host", "x-envoy-expected-rq-timeout-ms",
	"x-envoy-internal", "x-envoy-original-path", "x-envoy-decorator-operation",
}

// RouteConfiguration is the one route table: virtual host "*", per pool a
// long-job route and an ordinary route matching x-swarmgate-pool exactly, and
// a catch-all 404.
func RouteConfiguration(g *ir.Gateway) *routev3.RouteConfiguration {
	vh := &routev3.VirtualHost{
		Name:    VirtualHostName,
		Domains: []string{"*"},
		// Raises the stream's buffer limit to max_body_bytes while ext_proc
		// buffers the body on the catch-all route (only raises:
		// ConnectionManagerImpl::ActiveStream::refreshBufferLimit,
		// conn_manager_impl.cc, v1.38.0). That catch-all must therefore be a
		// route entry, not a direct response: see noPoolRoute.
		RequestBodyBufferLimit: wrapperspb.UInt64(uint64(g.MaxBodyBytes)),
		RequestHeadersToRemove: ProviderHiddenHeaders,
	}
	for i := range g.Pools {
		p := &g.Pools[i]
		vh.Routes = append(vh.Routes,
			poolRoute(g, p, p.Cluster+"_long", p.LongTimeout, true),
			poolRoute(g, p, p.Cluster, p.Timeout, false),
		)
	}
	vh.Routes = append(vh.Routes, noPoolRoute())
	return &routev3.RouteConfiguration{Name: RouteName, VirtualHosts: []*routev3.VirtualHost{vh}}
}

func exactHeader(name, value string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
		StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: value}},
	}}
}

func poolRoute(g *ir.Gateway, p *ir.Pool, name string, timeout time.Duration, long bool) *routev3.Route {
	headers := []*routev3.HeaderMatcher{exactHeader(contract.HeaderPool, p.Cluster)}
	if long {
		headers = append(headers, exactHeader(contract.HeaderLong, "1"))
	}
	return &routev3.Route{
		Name: name,
		Match: &routev3.RouteMatch{
			PathSpecifier:   &routev3.RouteMatch_Prefix{Prefix: "/"},
			Headers:         headers,
			DynamicMetadata: []*matcherv3.MetadataMatcher{admitted()},
		},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: p.Cluster},
			Timeout:          dur(timeout),
			// Streams may pause (reasoning models) but not for longer than
			// the whole request may take.
			IdleTimeout: dur(timeout),
			// Host comes from the chosen endpoint's hostname (the backend's
			// server name), so relays see their own name.
			HostRewriteSpecifier: &routev3.RouteAction_AutoHostRewrite{AutoHostRewrite: wrapperspb.Bool(true)},
			RetryPolicy:          retryPolicy(g),
		}},
	}
}

// retryPolicy: another key is tried on 429 (previous_hosts forces another
// host when the priority has one; with a single host Envoy reuses it after
// host_selection_retry_max_attempts, and the upstream ext_proc picks another
// key), and previous_priorities moves a retry to the next priority (relay)
// once the current one failed. Retries stay inside the route's cluster.
// https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/http/http_connection_management#retry-plugin-configuration
func retryPolicy(g *ir.Gateway) *routev3.RetryPolicy {
	r := &routev3.RetryPolicy{
		RetryOn:              RetryOn,
		NumRetries:           u32(uint32(max(g.Retry.NumRetries, 0))),
		RetriableStatusCodes: RetriableStatusCodes,
		RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{
			Name:       "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: mustAny(&previoushostsv3.PreviousHostsPredicate{})},
		}},
		HostSelectionRetryMaxAttempts: 3,
		RetryPriority: &routev3.RetryPolicy_RetryPriority{
			Name: "envoy.retry_priorities.previous_priorities",
			ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: mustAny(
				&previousprioritiesv3.PreviousPrioritiesConfig{UpdateFrequency: 1})},
		},
		RetryBackOff: &routev3.RetryPolicy_RetryBackOff{
			BaseInterval: dur(g.Retry.BackoffBase.D()),
			MaxInterval:  dur(g.Retry.BackoffMax.D()),
		},
		// A 429 with Retry-After waits what the provider asked (bounded).
		RateLimitedRetryBackOff: &routev3.RetryPolicy_RateLimitedRetryBackOff{
			ResetHeaders: []*routev3.RetryPolicy_ResetHeader{
				{Name: "retry-after", Format: routev3.RetryPolicy_SECONDS},
			},
			MaxInterval: dur(g.Retry.BackoffMax.D()),
		},
	}
	// The per-try timer starts when the pool hands the attempt a
	// connection, before the upstream ext_proc has answered (Envoy asks
	// the pool first: UpstreamRequest::acceptHeadersFromRouter, then
	// onPoolReady → setupPerTryTimeout; upstream_request.cc, v1.38.0 and
	// main), so per_try_timeout covers the upstream ext_proc's round trip
	// as well as the provider's answer (TestPerTryTimeoutCoversUpstreamExtProc).
	if d := g.Retry.PerTryTimeout.D(); d > 0 {
		r.PerTryTimeout = dur(d)
	}
	return r
}

// noPoolRoute is the catch-all: what ext_proc did not route (no pool
// header) gets a 404. It is a route entry that names no existing cluster
// rather than a direct_response, because Envoy applies the virtual host's
// request_body_buffer_limit only while the cached route has a route entry
// (ConnectionManagerImpl::ActiveStream::refreshBufferLimit returns early
// for a direct response; conn_manager_impl.cc, v1.38.0 and main). Every
// request is on this route while ext_proc buffers its body, so with a
// direct response the listener's own buffer limit (1 MiB by default in an
// existing mesh's listener) capped bodies instead of max_body_bytes.
//
// The cluster comes from a header (NoRouteHeader) rather than a fixed
// missing name: grpc-go ignores a cluster_header route (unmarshal_rds.go,
// "unknown ClusterSpecifier"), where a named cluster would make it wait for
// a CDS resource that never comes and hold every RPC.
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/route/v3/route_components.proto#envoy-v3-api-field-config-route-v3-routeaction-cluster-not-found-response-code
func noPoolRoute() *routev3.Route {
	return &routev3.Route{
		Name:  NoRouteName,
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier:            &routev3.RouteAction_ClusterHeader{ClusterHeader: NoRouteHeader},
			ClusterNotFoundResponseCode: routev3.RouteAction_NOT_FOUND,
		}},
	}
}

// admitted matches a request the router-level ext_proc admitted: its
// tenant is in the dynamic metadata ext_proc returned (receiving
// namespace contract.MetadataNamespace), which a client cannot write. A
// pool route also requires it, so a request that did not pass through
// ext_proc (failure_modes.extproc: open while ext_proc is down, or an
// Envoy whose ext_proc cluster is missing) reaches no provider even with a
// forged x-swarmgate-pool header: it meets the catch-all 404. Without it,
// such a request went to the provider carrying the client's own
// credential (TestRequestsBypassingExtProcNeverReachAProvider). gRPC
// clients ignore the matcher (grpc-go reads no dynamic_metadata).
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/route/v3/route_components.proto#envoy-v3-api-field-config-route-v3-routematch-dynamic-metadata
func admitted() *matcherv3.MetadataMatcher {
	return &matcherv3.MetadataMatcher{
		Filter: contract.MetadataNamespace,
		Path:   []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: contract.MetaTenant}}},
		Value:  &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_PresentMatch{PresentMatch: true}},
	}
}
