package translator

import (
	"strconv"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/structpb"
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
			{Name: FilterRouter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}},
		},
		// A long non-streaming job sends no byte for minutes: the default
		// 5 min stream idle timeout would cut it before the route timeout.
		// A request waiting in the admission queue sends nothing either.
		StreamIdleTimeout: dur(max(maxPoolTimeout(g), g.AdmissionMaxWait) + g.MessageTimeout),
		UseRemoteAddress:  wrapperspb.Bool(true),
		NormalizePath:     wrapperspb.Bool(true),
		MergeSlashes:      true,
		LocalReplyConfig:  localReplies(g.MaxBodyBytes),
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

// localReplies rewrites Envoy's own local replies to OpenAI-shaped JSON
// errors. Mappers select by response flag, so replies without a flag (the
// ext_proc ImmediateResponse bodies, which ext_proc already formats, and the
// 404 direct response) pass through untouched.
// https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_conn_man/local_reply
func localReplies(maxBody uint32) *hcmv3.LocalReplyConfig {
	byFlags := func(flags ...string) *accesslogv3.AccessLogFilter {
		return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ResponseFlagFilter{
			ResponseFlagFilter: &accesslogv3.ResponseFlagFilter{Flags: flags},
		}}
	}
	mapper := func(filter *accesslogv3.AccessLogFilter, message, typ, code string) *hcmv3.ResponseMapper {
		body, _ := structpb.NewStruct(map[string]any{"error": map[string]any{
			"message": message, "type": typ, "code": code,
		}})
		return &hcmv3.ResponseMapper{
			Filter: filter,
			BodyFormatOverride: &corev3.SubstitutionFormatString{
				Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: body},
			},
		}
	}
	// 413 from the buffer limit carries no response flag; an ext_proc 413
	// says the same thing, so rewriting both is harmless.
	tooLarge := &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_StatusCodeFilter{
		StatusCodeFilter: &accesslogv3.StatusCodeFilter{Comparison: &accesslogv3.ComparisonFilter{
			Op:    accesslogv3.ComparisonFilter_EQ,
			Value: &corev3.RuntimeUInt32{DefaultValue: 413, RuntimeKey: "swarmgate.local_reply.too_large"},
		}},
	}}
	// RL: the rate-limit filter refused the request (429). Envoy's filter
	// sets x-ratelimit-reset (seconds, enable_x_ratelimit_headers) but no
	// Retry-After, which OpenAI SDKs read for their back-off; headers_to_add
	// is evaluated after the filter's headers are on the reply.
	rateLimited := mapper(byFlags("RL"), "Rate limit reached for this tenant or model; retry later.", "requests", "rate_limit_exceeded")
	rateLimited.HeadersToAdd = []*corev3.HeaderValueOption{{
		Header:       &corev3.HeaderValue{Key: "retry-after", Value: "%RESP(x-ratelimit-reset)%"},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}}
	return &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{
		rateLimited,
		// RLSE: the rate-limit service failed and failure_mode_deny is on.
		mapper(byFlags("RLSE"), "Rate limit service unavailable.", "server_error", "rate_limit_service_unavailable"),
		// UT: upstream timeout.
		mapper(byFlags("UT"), "The upstream model did not answer in time.", "server_error", "timeout"),
		// No healthy host, connection failures, overflow, retries exhausted.
		mapper(byFlags("UH", "UF", "UO", "URX", "UC", "LH"), "No upstream is available for this model: %LOCAL_REPLY_BODY%", "server_error", "upstream_unavailable"),
		mapper(tooLarge, "Request body is larger than the gateway accepts ("+strconv.FormatUint(uint64(maxBody), 10)+" bytes).", "invalid_request_error", "request_too_large"),
		// Malformed downstream HTTP.
		mapper(byFlags("DPE"), "Request could not be processed: %LOCAL_REPLY_BODY%", "invalid_request_error", "invalid_request"),
	}}
}
