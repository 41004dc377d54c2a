package translator

import (
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"time"

	mutationv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitconfv3 "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/xds/ir"
)

// RouterExtProc is the router-level ext_proc filter: authentication, body
// parsing, routing headers (with clear_route_cache), usage accounting on the
// streamed response.
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/filters/http/ext_proc/v3/ext_proc.proto
func RouterExtProc(g *ir.Gateway) *extprocv3.ExternalProcessor {
	return &extprocv3.ExternalProcessor{
		GrpcService:      envoyGRPC(contract.ClusterExtProc, contract.RoleRouter),
		FailureModeAllow: g.ExtProcFailOpen,
		ProcessingMode: &extprocv3.ProcessingMode{
			RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
			RequestBodyMode:     extprocv3.ProcessingMode_BUFFERED,
			RequestTrailerMode:  extprocv3.ProcessingMode_SKIP,
			ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
			ResponseBodyMode:    extprocv3.ProcessingMode_STREAMED,
			ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
		},
		// 200 ms default is too short for a multi-megabyte prompt.
		MessageTimeout:    dur(g.MessageTimeout),
		MaxMessageTimeout: dur(maxMessageTimeout(g)),
		StatPrefix:        "router",
		// ext_proc sets only x-swarmgate-* headers and rewrites the body (and
		// content-length with it); routing headers and x-envoy-* stay
		// protected. A rejected mutation is dropped and counted (stat
		// rejected_header_mutations) rather than failing the request.
		MutationRules: &mutationv3.HeaderMutationRules{
			AllowAllRouting: wrapperspb.Bool(false),
			AllowEnvoy:      wrapperspb.Bool(false),
			DisallowIsError: wrapperspb.Bool(false),
		},
		MetadataOptions: &extprocv3.MetadataOptions{
			ReceivingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{
				Untyped: []string{contract.MetadataNamespace, contract.AdmissionNamespace},
			},
		},
		// ext_proc skips the response body of non-JSON/SSE answers.
		AllowModeOverride: true,
	}
}

// UpstreamExtProc is the per-attempt ext_proc filter on every pool cluster
// (HttpProtocolOptions.http_filters): key choice and credentials, per-backend
// path and model name, breaker feedback from the attempt's response headers.
// ImmediateResponse and clear_route_cache are ignored there.
// https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/ext_proc_filter
//
// The request body is not sent by default: an attempt whose endpoint
// renames the model asks for it with a mode_override in its headers answer,
// which Envoy honours only with allow_mode_override (ext_proc.proto). So the
// other attempts of a pool that mixes renaming and non-renaming targets do
// not carry the whole body to ext_proc and back.
func UpstreamExtProc(g *ir.Gateway) *extprocv3.ExternalProcessor {
	return &extprocv3.ExternalProcessor{
		GrpcService:      envoyGRPC(contract.ClusterExtProc, contract.RoleUpstream),
		FailureModeAllow: g.ExtProcFailOpen,
		ProcessingMode: &extprocv3.ProcessingMode{
			RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
			RequestBodyMode:     extprocv3.ProcessingMode_NONE,
			RequestTrailerMode:  extprocv3.ProcessingMode_SKIP,
			ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
			ResponseBodyMode:    extprocv3.ProcessingMode_NONE,
			ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
		},
		MessageTimeout: dur(g.MessageTimeout),
		// The key pick extends the headers message while it waits for a
		// paced key's slot (keypool.PickRequest.Extend).
		MaxMessageTimeout: dur(upstreamMaxMessageTimeout(g)),
		StatPrefix:        "upstream",
		// Credentials (authorization, x-api-key, api-key), :path onto the
		// backend's base path, host for relays that need it.
		MutationRules: &mutationv3.HeaderMutationRules{
			AllowAllRouting: wrapperspb.Bool(true),
			AllowEnvoy:      wrapperspb.Bool(false),
			DisallowIsError: wrapperspb.Bool(false),
		},
		RequestAttributes: []string{contract.AttrUpstreamHostMetadata, contract.AttrAttemptCount},
		AllowModeOverride: true,
		// The admission facts the router-level filter returned as dynamic
		// metadata reach every attempt as metadata_context. The upstream
		// filter manager's stream info is the downstream request's
		// (UpstreamFilterManager::streamInfo, upstream_request.cc; read in
		// ext_proc.cc Filter::addDynamicMetadata, Envoy 1.38).
		MetadataOptions: &extprocv3.MetadataOptions{
			ForwardingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{
				Untyped: []string{contract.AdmissionNamespace},
			},
		},
	}
}

// maxMessageTimeout bounds the override_message_timeout the router-level
// ext_proc sends to hold a request in the admission queue: it covers the
// longest wait plus the answer's own message_timeout. Envoy honours one
// override per message, between 1 ms and this bound (ext_proc.cc
// Filter::onNewTimeout, processor_state.cc restartMessageTimer, v1.38.0);
// config validation keeps it within the proto's 1h.
func maxMessageTimeout(g *ir.Gateway) time.Duration {
	return max(g.MessageTimeout, 30*time.Second, g.AdmissionMaxWait+g.MessageTimeout)
}

// upstreamMaxMessageTimeout bounds the override_message_timeout the
// upstream ext_proc sends while an attempt's key pick waits for a paced
// key's slot: that wait plus the answer's message_timeout, and at least
// the router filter's bound.
func upstreamMaxMessageTimeout(g *ir.Gateway) time.Duration {
	return max(maxMessageTimeout(g), g.KeySlotWait+g.MessageTimeout)
}

// RateLimitFilter is the global rate-limit filter. Its descriptors are the
// filter-level rate_limits (hits_addend needs them; they do not support
// stage) and match RateLimitConfig.
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/filters/http/ratelimit/v3/rate_limit.proto
func RateLimitFilter(g *ir.Gateway) *ratelimitv3.RateLimit {
	return &ratelimitv3.RateLimit{
		Domain: g.RateLimitDomain,
		// Envoy's 20 ms default is tight for a Redis round trip under
		// load: a burst of 2,000 requests on a 2-core machine let most
		// checks through at 100 ms (fail open), limits unenforced.
		Timeout:         dur(g.RateLimitTimeout),
		FailureModeDeny: g.RateLimitFailClosed,
		// Fail-closed answers 503 (Envoy's default on error is 500), which
		// clients and SDKs retry as "service unavailable".
		StatusOnError: &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
		RateLimitService: &ratelimitconfv3.RateLimitServiceConfig{
			GrpcService:         envoyGRPC(contract.ClusterRateLimit, ""),
			TransportApiVersion: corev3.ApiVersion_V3,
		},
		EnableXRatelimitHeaders: ratelimitv3.RateLimit_DRAFT_VERSION_03,
		StatPrefix:              "swarmgate",
		RateLimits:              rateLimits(g),
	}
}

func rateLimits(g *ir.Gateway) []*routev3.RateLimit {
	out := RateLimitActions(g.TokenLimits)
	if g.Subkeys {
		out = append(out, SubkeyRateLimitActions()...)
	}
	return out
}

// Format strings for hits_addend: one substitution whose result is a
// non-negative integer. The prompt estimate is charged when the request
// arrives; the top-up (completion tokens plus any prompt tokens above the
// estimate) when the stream is done. Both come from the router-level
// ext_proc's dynamic metadata, never from request headers: the upstream
// filters share and strip the request header map before the rate-limit
// filter rebuilds its stream-done descriptors from it (ratelimit.cc
// onDestroy, Envoy 1.38).
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/route/v3/route_components.proto#envoy-v3-api-msg-config-route-v3-ratelimit-hitsaddend
const (
	HitsEstimate = "%DYNAMIC_METADATA(" + contract.MetadataNamespace + ":" + contract.MetaEstTokens + ")%"
	HitsTopUp    = "%DYNAMIC_METADATA(" + contract.MetadataNamespace + ":" + contract.MetaTokensTopUp + ")%"
)

// RateLimitActions are the descriptors the Envoy filter sends:
//
//	[tenant, limit=rpm] [tenant, limit=rpd] [tenant, model, limit=rpm]
//	and with token limits [tenant, limit=tpm] [tenant, model, limit=tpm],
//	each twice: estimate at request time, top-up at stream done.
//
// Tenant and model come from the admission metadata (metadata actions,
// source DYNAMIC): a descriptor whose entry is missing (no tenant: not
// admitted, already refused by ext_proc) is not sent.
func RateLimitActions(tokens bool) []*routev3.RateLimit {
	tenant := metadata(contract.MetaTenant, contract.DescTenant)
	model := metadata(contract.MetaModel, contract.DescModel)
	out := []*routev3.RateLimit{
		{Actions: actions(tenant, limit(contract.LimitRPM))},
		{Actions: actions(tenant, limit(contract.LimitRPD))},
		{Actions: actions(tenant, model, limit(contract.LimitRPM))},
	}
	if tokens {
		for _, acts := range [][]*routev3.RateLimit_Action{
			actions(tenant, limit(contract.LimitTPM)),
			actions(tenant, model, limit(contract.LimitTPM)),
		} {
			out = append(out,
				&routev3.RateLimit{Actions: acts, HitsAddend: &routev3.RateLimit_HitsAddend{Format: HitsEstimate}},
				&routev3.RateLimit{Actions: acts, HitsAddend: &routev3.RateLimit_HitsAddend{Format: HitsTopUp}, ApplyOnStreamDone: true},
			)
		}
	}
	return out
}

// SubkeyRateLimitActions are the sub-key descriptors, after
// RateLimitActions when sub-keys are on:
//
//	[subkey=<id>, limit=rpm, quota=<rpm>] [subkey=<id>, limit=rpd, quota=<rpd>]
//	[subkey=<id>, limit=tpm, quota=<tpm>] at request time (estimate) and
//	at stream done (top-up), like the tenant's tokens.
//
// The id is the admitted virtual key; the quota is the key's limit, which
// ext_proc puts in the dynamic metadata only for a sub-key that has it, so
// a config key, or a sub-key without that limit, sends no such descriptor.
// The rate-limit service turns the quota into the descriptor's limit
// override (ratelimit/service applyQuotas): one xDS config for every key,
// nothing regenerated when keys are minted. Sub-key tokens are charged
// this way in both accounting.token_limits modes.
//
// Why not RateLimit.limit (dynamic_metadata) here: Envoy 1.38 refuses the
// field in the filter-level rate_limits ("'limit' field is not supported",
// source/extensions/filters/common/ratelimit_config/ratelimit_config.cc,
// v1.38.0; accepted from #45613, 1.39), and only those carry hits_addend.
//
// The same four again for the sub-key that minted the caller, when it has
// limits ([subkey=<parent_key>, limit=…, quota=<parent_…>]): the same
// counters as the minter's own requests, so a minter's windows bound the
// keys it minted together.
func SubkeyRateLimitActions() []*routev3.RateLimit {
	own := keyRateLimits(contract.MetaVirtualKey, contract.MetaSubkeyRPM, contract.MetaSubkeyRPD, contract.MetaSubkeyTPM)
	return append(own, keyRateLimits(contract.MetaParentKey, contract.MetaParentRPM, contract.MetaParentRPD, contract.MetaParentTPM)...)
}

// keyRateLimits are one key's descriptors: its id and its limits read
// from the named metadata fields.
func keyRateLimits(idKey, rpmKey, rpdKey, tpmKey string) []*routev3.RateLimit {
	id := metadata(idKey, contract.DescSubkey)
	tpm := actions(id, limit(contract.LimitTPM), metadata(tpmKey, contract.DescQuota))
	return []*routev3.RateLimit{
		{Actions: actions(id, limit(contract.LimitRPM), metadata(rpmKey, contract.DescQuota))},
		{Actions: actions(id, limit(contract.LimitRPD), metadata(rpdKey, contract.DescQuota))},
		{Actions: tpm, HitsAddend: &routev3.RateLimit_HitsAddend{Format: HitsEstimate}},
		{Actions: tpm, HitsAddend: &routev3.RateLimit_HitsAddend{Format: HitsTopUp}, ApplyOnStreamDone: true},
	}
}

func actions(a ...*routev3.RateLimit_Action) []*routev3.RateLimit_Action { return a }

func metadata(key, descriptorKey string) *routev3.RateLimit_Action {
	return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_Metadata{
		Metadata: &routev3.RateLimit_Action_MetaData{
			DescriptorKey: descriptorKey,
			MetadataKey: &metadatav3.MetadataKey{Key: contract.MetadataNamespace,
				Path: []*metadatav3.MetadataKey_PathSegment{{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: key}}}},
			Source: routev3.RateLimit_Action_MetaData_DYNAMIC,
		},
	}}
}

func limit(kind string) *routev3.RateLimit_Action {
	return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{
		GenericKey: &routev3.RateLimit_Action_GenericKey{DescriptorKey: contract.DescLimit, DescriptorValue: kind},
	}}
}
