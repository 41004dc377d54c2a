package translator

import (
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
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

// NoPoolBody is the 404 answer to a request ext_proc did not route (no pool
// header): a clean OpenAI-shaped error instead of a hang or an empty reply.
const NoPoolBody = `{"error":{"message":"No model route matched this request.","type":"invalid_request_error","code":"model_not_found"}}`

// RouteConfiguration is the one route table: virtual host "*", per pool a
// long-job route and an ordinary route matching x-swarmgate-pool exactly, and
// a catch-all 404.
func RouteConfiguration(g *ir.Gateway) *routev3.RouteConfiguration {
	vh := &routev3.VirtualHost{
		Name:    VirtualHostName,
		Domains: []string{"*"},
		// Raises the stream's buffer limit while ext_proc buffers the body
		// (only raises: ConnectionManagerImpl::ActiveStream::refreshBufferLimit,
		// conn_manager_impl.cc, Envoy 1.38), when the catch-all route is the
		// one cached: so it must be on the virtual host.
		RequestBodyBufferLimit: wrapperspb.UInt64(uint64(g.MaxBodyBytes)),
	}
	for i := range g.Pools {
		p := &g.Pools[i]
		vh.Routes = append(vh.Routes,
			poolRoute(g, p, p.Cluster+"_long", p.LongTimeout, true),
			poolRoute(g, p, p.Cluster, p.Timeout, false),
		)
	}
	vh.Routes = append(vh.Routes, &routev3.Route{
		Name:  NoRouteName,
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
			Status: 404,
			Body:   &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: NoPoolBody}},
		}},
		ResponseHeadersToAdd: []*corev3.HeaderValueOption{{
			Header:       &corev3.HeaderValue{Key: "content-type", Value: "application/json"},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}},
	})
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
			PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"},
			Headers:       headers,
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
	if d := g.Retry.PerTryTimeout.D(); d > 0 {
		r.PerTryTimeout = dur(d)
	}
	return r
}
