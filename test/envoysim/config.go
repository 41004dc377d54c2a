package envoysim

import (
	"time"

	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/swarmgate/swarmgate/test/rlsim"
)

// Config describes one simulated Envoy listener.
type Config struct {
	// Routes are matched in order; the first match wins
	// (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/http/http_routing).
	Routes   []Route
	Clusters []Cluster
	// RouterFilter is the HCM-level ext_proc filter; nil means none.
	RouterFilter *Filter
	// BufferLimit is the connection buffer limit: a BUFFERED body above it
	// fails the request with 413
	// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/filters/http/ext_proc/v3/processing_mode.proto).
	// Zero means 1 MiB, Envoy's per_connection_buffer_limit_bytes default.
	BufferLimit int
	// RouteBufferLimit is the virtual host's request_body_buffer_limit
	// (else per_request_buffer_limit_bytes). It raises the stream's limit
	// only when the route matched on the request headers forwards
	// somewhere: ActiveStream::refreshBufferLimit (conn_manager_impl.cc,
	// v1.38.0) does nothing while the cached route is a direct response, so
	// a body buffered on a catch-all direct-response route (an ext_proc
	// clears the route later) is held to BufferLimit. Zero: none.
	RouteBufferLimit int
	// Seed makes weighted endpoint choice deterministic.
	Seed uint64
	// EnvoyHeaderPrefix is the prefix of Envoy-internal headers; "x-envoy".
	EnvoyHeaderPrefix string
	// UseRemoteAddress is the HCM use_remote_address. With it every request
	// is an edge request (the default internal_address_config treats no
	// address as internal, conn_manager_config.h DefaultInternalAddressConfig,
	// v1.38.0), and an edge request gets a new x-request-id unless
	// PreserveExternalRequestID (HCM ConnectionManagerUtility::mutateRequestHeaders
	// and source/extensions/request_id/uuid/config.cc UUIDRequestIDExtension::set,
	// v1.38.0). Without it a client's x-request-id is kept.
	UseRemoteAddress          bool
	PreserveExternalRequestID bool
	// SuppressEnvoyHeaders is the router's suppress_envoy_headers: no
	// x-envoy-expected-rq-timeout-ms, x-envoy-upstream-service-time or
	// x-envoy-original-host (router.cc, upstream_request.cc, v1.38.0).
	SuppressEnvoyHeaders bool
	// LocalReply is the HCM's local_reply_config: mappers that rewrite
	// local replies by response flag, status, request header and dynamic
	// metadata (localreply.go; New rejects what is not modelled).
	LocalReply *hcmv3.LocalReplyConfig
	// RateLimit is the HCM's envoy.filters.http.ratelimit filter, between
	// the router-level ext_proc and the router; nil means none.
	RateLimit *rlsim.Filter
}

// Route selects a cluster by exact header match.
type Route struct {
	Name string
	// Headers must all be present with exactly these values; empty matches all.
	Headers map[string]string
	// PathPrefix, when set, must prefix :path.
	PathPrefix string
	// Cluster is the target cluster, or ClusterHeader names a request header
	// whose value is the cluster (RouteAction.cluster_header,
	// https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/route/v3/route_components.proto#envoy-v3-api-field-config-route-v3-routeaction-cluster-header).
	Cluster       string
	ClusterHeader string
	Timeout       time.Duration // 0: Envoy's 15 s route default
	Retry         *RetryPolicy
	// AutoHostRewrite sets Host to the chosen endpoint's hostname (its
	// address when it has none).
	AutoHostRewrite bool
	// MetadataPresent are dynamic_metadata matchers of the route match
	// that need a key to be present: namespace → key.
	MetadataPresent map[string]string
	// RequestHeadersToRemove are the route configuration's, virtual host's
	// and route's request_headers_to_remove, removed from the request
	// header map once by the router before the first attempt
	// (RouteEntryImplBase::finalizeRequestHeaders from router.cc
	// Filter::decodeHeaders, after x-envoy-expected-rq-timeout-ms is set;
	// a retry sets that header again, v1.38.0).
	RequestHeadersToRemove []string
	// ClusterNotFoundStatus is cluster_not_found_response_code as a status
	// (0: 503).
	ClusterNotFoundStatus int
	// DirectStatus, when set, answers locally (DirectResponseAction) with
	// DirectBody and ResponseHeaders.
	DirectStatus    int
	DirectBody      string
	ResponseHeaders map[string]string
}

// RetryPolicy is the subset of route.v3.RetryPolicy swarmgate generates
// (https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/router_filter#x-envoy-retry-on).
type RetryPolicy struct {
	// RetryOn: "5xx", "reset", "connect-failure", "retriable-status-codes",
	// "gateway-error".
	RetryOn              []string
	RetriableStatusCodes []int
	// RetriableHeaders are response header names whose presence makes an
	// attempt retriable ("retriable-headers", present_match only).
	RetriableHeaders []string
	NumRetries       int
	PerTryTimeout    time.Duration
	// PreviousHosts is retry_host_predicate envoy.retry_host_predicates.previous_hosts.
	PreviousHosts bool
	// PreviousPriorities is retry_priority envoy.retry_priorities.previous_priorities.
	PreviousPriorities bool
	// BackoffBase is retry_back_off.base_interval (Envoy default 25 ms).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// RetryAfterBackoff is rate_limited_retry_back_off with one retry-after
	// reset header in SECONDS (kept for older callers; ResetHeaders wins).
	RetryAfterBackoff bool
	// ResetHeaders are rate_limited_retry_back_off.reset_headers; a value
	// above RateLimitedMax (max_interval, default 300 s) is ignored and the
	// regular back-off applies (retry_state_impl.cc parseResetInterval, v1.38.0).
	ResetHeaders   []ResetHeader
	RateLimitedMax time.Duration
	// HostSelectionMaxAttempts is host_selection_retry_max_attempts (0: 1).
	HostSelectionMaxAttempts int
	// PreviousPrioritiesUpdateFrequency is previous_priorities'
	// update_frequency (0: 1).
	PreviousPrioritiesUpdateFrequency int
}

// ResetHeader is RetryPolicy.ResetHeader; Format is "SECONDS" or
// "UNIX_TIMESTAMP".
type ResetHeader struct {
	Name   string
	Format string
}

// RetryBudget is circuit_breakers.thresholds.retry_budget.
type RetryBudget struct {
	BudgetPercent       float64 // 0: Envoy's 20
	MinRetryConcurrency *int    // nil: Envoy's 3
}

// Cluster is a set of prioritised, weighted endpoints.
type Cluster struct {
	Name      string
	Endpoints []Endpoint
	// UpstreamFilter is the ext_proc filter in the cluster's
	// HttpProtocolOptions.http_filters, run once per attempt
	// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/upstreams/http/v3/http_protocol_options.proto#envoy-v3-api-field-extensions-upstreams-http-v3-httpprotocoloptions-http-filters).
	UpstreamFilter *Filter
	// HealthyPanicThreshold is common_lb_config.healthy_panic_threshold in
	// percent; nil means Envoy's 50, 0 disables panic routing.
	HealthyPanicThreshold *float64
	// OverprovisioningFactor is the ClusterLoadAssignment policy's
	// overprovisioning_factor in percent; 0 means Envoy's 140.
	OverprovisioningFactor int
	// RetryBudget is the DEFAULT-priority threshold's retry_budget; without
	// it concurrent retries are capped at MaxRetries (nil: Envoy's 3).
	RetryBudget *RetryBudget
	MaxRetries  *int
}

// Endpoint is one upstream host.
type Endpoint struct {
	Address   string // host:port
	Hostname  string // endpoint.hostname, used by auto_host_rewrite
	Priority  int
	Weight    int // 0 means 1
	Unhealthy bool
	// Metadata is the endpoint's filter_metadata: namespace → key → value.
	Metadata map[string]map[string]string
}

// Filter is the ext_proc filter configuration the sim honours
// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/filters/http/ext_proc/v3/ext_proc.proto).
type Filter struct {
	// Target is the ext_proc gRPC server address (host:port). With Targets,
	// streams go round robin over several servers instead (replicas behind
	// one cluster).
	Target  string
	Targets []string
	// InitialMetadata is sent as gRPC metadata on every stream
	// (grpc_service.initial_metadata).
	InitialMetadata map[string]string
	Mode            *extprocfilter.ProcessingMode
	// AllowModeOverride honours ProcessingResponse.mode_override sent with
	// a headers response.
	AllowModeOverride bool
	// MessageTimeout per message; Envoy's default is 200 ms.
	MessageTimeout time.Duration
	// FailureModeAllow continues the request when the server fails or
	// times out instead of failing it (500 / 504).
	FailureModeAllow bool
	// RequestAttributes are sent with the first request message.
	RequestAttributes []string
	// ReceivingNamespaces is metadata_options.receiving_namespaces.untyped:
	// dynamic metadata in other namespaces is dropped.
	ReceivingNamespaces []string
	// AllowAllRouting and AllowEnvoy are mutation_rules fields
	// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/common/mutation_rules/v3/mutation_rules.proto).
	AllowAllRouting bool
	AllowEnvoy      bool
	// DisallowIsError fails the request with 500 on a rejected mutation.
	DisallowIsError bool
	// ForwardingNamespaces is metadata_options.forwarding_namespaces.untyped:
	// these namespaces of the stream's dynamic metadata go to the server in
	// every request message's metadata_context.
	ForwardingNamespaces []string
	// MaxMessageTimeout bounds override_message_timeout (0: ignored).
	MaxMessageTimeout time.Duration
	// StatusOnError is status_on_error (0 or below 200: 500).
	StatusOnError int
	// RouteCacheAction is route_cache_action: "" or "DEFAULT", "CLEAR",
	// "RETAIN".
	RouteCacheAction string
}
