package translator

import (
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/swarmgate/swarmgate/xds/ir"
)

// Listener is the gateway listener: one HTTP connection manager whose filter
// chain is router-level ext_proc → ratelimit → router.
func Listener(g *ir.Gateway) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name: ListenerName,
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address:       g.ListenerAddress,
			PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: g.ListenerPort},
		}}},
		// The effective request buffer limit is min(this, the virtual host's
		// per_request_buffer_limit_bytes); both are max_body_bytes so the
		// BUFFERED ext_proc body mode accepts exactly request.max_body_bytes
		// and answers 413 above it.
		// https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/route/v3/route_components.proto#envoy-v3-api-field-config-route-v3-virtualhost-per-request-buffer-limit-bytes
		PerConnectionBufferLimitBytes: u32(g.MaxBodyBytes),
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{
				Name:       HCMName,
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(HTTPConnectionManager(g))},
			}},
		}},
	}
}

// HTTPConnectionManager is the listener's HCM (also used by the existing-mesh
// example, where it is pasted into another listener).
func HTTPConnectionManager(g *ir.Gateway) *hcmv3.HttpConnectionManager {
	h := &hcmv3.HttpConnectionManager{
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		StatPrefix: StatPrefix,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource: ads(), RouteConfigName: RouteName,
		}},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: FilterExtProc, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(RouterExtProc(g))}},
			{Name: FilterRateLimit, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(RateLimitFilter(g))}},
			{Name: FilterRouter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(Router())}},
		},
		// A long non-streaming job sends no byte for minutes: the default
		// 5 min stream idle timeout would cut it before the route timeout.
		// A request waiting in the admission queue sends nothing either.
		StreamIdleTimeout: dur(max(maxPoolTimeout(g), g.AdmissionMaxWait) + g.MessageTimeout),
		UseRemoteAddress:  wrapperspb.Bool(true),
		NormalizePath:     wrapperspb.Bool(true),
		MergeSlashes:      true,
		LocalReplyConfig:  LocalReplies(g.MaxBodyBytes),
	}
	if g.AccessLog {
		h.AccessLog = []*accesslogv3.AccessLog{{
			Name:       "envoy.access_loggers.stdout",
			ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: mustAny(&streamv3.StdoutAccessLog{})},
		}}
	}
	return h
}

func maxPoolTimeout(g *ir.Gateway) time.Duration {
	var d time.Duration
	for i := range g.Pools {
		d = max(d, g.Pools[i].Timeout, g.Pools[i].LongTimeout)
	}
	if d == 0 {
		d = 5 * time.Minute
	}
	return d
}

// Router is the gateway's router filter. suppress_envoy_headers keeps the
// router's own x-envoy-* headers off the upstream request: it adds
// x-envoy-expected-rq-timeout-ms to every attempt and, when
// auto_host_rewrite replaces the host in onPoolReady,
// x-envoy-original-host (the client's Host) — both after the route's
// request_headers_to_remove were applied, so only this stops them
// (router.cc Filter::decodeHeaders, upstream_request.cc onPoolReady,
// v1.38.0). Providers must not learn how Envoy was reached.
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/filters/http/router/v3/router.proto
func Router() *routerv3.Router {
	return &routerv3.Router{SuppressEnvoyHeaders: true}
}
