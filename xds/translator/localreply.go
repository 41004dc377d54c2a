package translator

import (
	"net/http"
	"strconv"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// AnthropicPathPrefix is the path of the Anthropic Messages family: local
// replies under it get Anthropic's error shape, all others OpenAI's (chat
// completions and Responses clients share it).
const AnthropicPathPrefix = "/v1/messages"

// localReplyCase is one kind of Envoy local reply and the error a client
// gets for it.
type localReplyCase struct {
	match   *accesslogv3.AccessLogFilter
	message string
	typ     string // OpenAI "type"
	code    string // OpenAI "code"
	// anthropic is Anthropic's status and error type for it
	// (https://docs.anthropic.com/en/api/errors).
	anthropicStatus uint32
	anthropicType   string
}

// LocalReplies shapes the local replies Envoy makes itself into the
// client's API family: Anthropic's {"type":"error","error":{...}} under
// /v1/messages, OpenAI's {"error":{...}} elsewhere.
//
// Every mapper applies only to a request the router-level ext_proc has not
// admitted (no tenant in its dynamic metadata). An admitted request's local
// replies reach that ext_proc on the response path, and it answers them
// itself in the client's shape with Retry-After; Envoy sends that
// ImmediateResponse through DownstreamFilterManager::sendDirectLocalReply,
// which runs these mappers again, and the response flags they would match
// (UH, URX, UT, RL…) are still set on the stream (filter_manager.cc,
// v1.38.0). Ungated, a mapper would overwrite the gateway's answer with
// OpenAI's shape and nest it in %LOCAL_REPLY_BODY%.
// https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_conn_man/local_reply
func LocalReplies(maxBody uint32) *hcmv3.LocalReplyConfig {
	cases := []localReplyCase{
		// RL: the rate-limit filter refused the request. Its descriptors
		// need the admitted tenant, so with ext_proc working this never
		// applies; kept for a gateway whose ext_proc fails open.
		{match: byFlags("RL"), message: "Rate limit reached for this tenant or model; retry later.",
			typ: "requests", code: "rate_limit_exceeded", anthropicStatus: http.StatusTooManyRequests, anthropicType: "rate_limit_error"},
		// RLSE: the rate-limit service failed and failure_mode_deny is on.
		{match: byFlags("RLSE"), message: "Rate limit service unavailable.",
			typ: "server_error", code: "rate_limit_service_unavailable", anthropicStatus: 529, anthropicType: "overloaded_error"},
		{match: byFlags("UT"), message: "The upstream model did not answer in time.",
			typ: "server_error", code: "timeout", anthropicStatus: http.StatusGatewayTimeout, anthropicType: "timeout_error"},
		// No healthy host, connection failures, overflow, retries exhausted.
		{match: byFlags("UH", "UF", "UO", "URX", "UC", "LH"), message: "No upstream is available for this model: %LOCAL_REPLY_BODY%",
			typ: "server_error", code: "upstream_unavailable", anthropicStatus: 529, anthropicType: "overloaded_error"},
		// The buffer limit's 413 carries no response flag.
		{match: byStatus(http.StatusRequestEntityTooLarge, "swarmgate.local_reply.too_large"),
			message: "Request body is larger than the gateway accepts (" + strconv.FormatUint(uint64(maxBody), 10) + " bytes).",
			typ:     "invalid_request_error", code: "request_too_large", anthropicStatus: http.StatusRequestEntityTooLarge, anthropicType: "request_too_large"},
		// NC: a request ext_proc did not route (no pool header) meets the
		// catch-all route, which names no cluster (see NoRouteHeader).
		{match: byFlags("NC"), message: "No model route matched this request.",
			typ: "invalid_request_error", code: "model_not_found", anthropicStatus: http.StatusNotFound, anthropicType: "not_found_error"},
		// Malformed downstream HTTP.
		{match: byFlags("DPE"), message: "Request could not be processed: %LOCAL_REPLY_BODY%",
			typ: "invalid_request_error", code: "invalid_request", anthropicStatus: http.StatusBadRequest, anthropicType: "invalid_request_error"},
	}
	out := &hcmv3.LocalReplyConfig{}
	for _, c := range cases {
		out.Mappers = append(out.Mappers, &hcmv3.ResponseMapper{
			Filter:             and(notAdmitted(), anthropicPath(), c.match),
			StatusCode:         wrapperspb.UInt32(c.anthropicStatus),
			BodyFormatOverride: jsonBody(map[string]any{"type": "error", "error": map[string]any{"type": c.anthropicType, "message": c.message}}),
		})
	}
	for _, c := range cases {
		out.Mappers = append(out.Mappers, &hcmv3.ResponseMapper{
			Filter:             and(notAdmitted(), c.match),
			BodyFormatOverride: jsonBody(map[string]any{"error": map[string]any{"message": c.message, "type": c.typ, "code": c.code}}),
		})
	}
	return out
}

func byFlags(flags ...string) *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ResponseFlagFilter{
		ResponseFlagFilter: &accesslogv3.ResponseFlagFilter{Flags: flags},
	}}
}

func byStatus(code uint32, runtimeKey string) *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_StatusCodeFilter{
		StatusCodeFilter: &accesslogv3.StatusCodeFilter{Comparison: &accesslogv3.ComparisonFilter{
			Op:    accesslogv3.ComparisonFilter_EQ,
			Value: &corev3.RuntimeUInt32{DefaultValue: code, RuntimeKey: runtimeKey},
		}},
	}}
}

// notAdmitted matches while the dynamic metadata has no tenant: the
// value matcher (null) never matches a set value, and a missing key
// matches (MetadataFilter::evaluate, access_log_impl.cc, v1.38.0).
func notAdmitted() *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_MetadataFilter{
		MetadataFilter: &accesslogv3.MetadataFilter{
			Matcher: &matcherv3.MetadataMatcher{
				Filter: contract.MetadataNamespace,
				Path:   []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: contract.MetaTenant}}},
				Value:  &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_NullMatch_{NullMatch: &matcherv3.ValueMatcher_NullMatch{}}},
			},
			MatchIfKeyNotFound: wrapperspb.Bool(true),
		},
	}}
}

// anthropicPath matches the request path of the Anthropic family. Mappers
// read the downstream request headers; only admitted requests reach an
// upstream filter that rewrites :path, and those are left alone.
func anthropicPath() *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_HeaderFilter{
		HeaderFilter: &accesslogv3.HeaderFilter{Header: &routev3.HeaderMatcher{
			Name: ":path",
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: AnthropicPathPrefix},
			}},
		}},
	}}
}

func and(fs ...*accesslogv3.AccessLogFilter) *accesslogv3.AccessLogFilter {
	return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_AndFilter{
		AndFilter: &accesslogv3.AndFilter{Filters: fs},
	}}
}

func jsonBody(v map[string]any) *corev3.SubstitutionFormatString {
	body, err := structpb.NewStruct(v)
	if err != nil {
		panic("translator: local reply body: " + err.Error())
	}
	return &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: body}}
}
