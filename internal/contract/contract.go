// Package contract holds the names the generated Envoy configuration (xds/)
// and the ext_proc service (extproc/) must agree on: internal headers,
// metadata namespaces and keys, cluster names and rate-limit descriptors.
// Changing a value here changes both sides at once.
package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Internal request headers. Envoy's upstream filters run on the router's own
// request header map (source/common/router/upstream_request.cc,
// UpstreamRequest::acceptHeadersFromRouter, v1.38.0): whatever one stage sets
// or removes is what every later attempt and the rate-limit filter at stream
// end see. So headers carry only what the route match needs; everything a
// later stage reads travels as dynamic metadata (MetadataNamespace) instead.
// ext_proc strips every client-supplied header with HeaderPrefix before it
// sets its own, so none of them can be spoofed, and the upstream filter
// removes them on every attempt before the request leaves Envoy.
const (
	HeaderPrefix = "x-swarmgate-"
	HeaderPool   = "x-swarmgate-pool" // cluster the route must pick
	HeaderLong   = "x-swarmgate-long" // "1": long job, longer route timeout
	// HeaderBackend and HeaderUpstreamKey are response headers the upstream
	// ext_proc adds on each attempt's response (backend name and upstream key
	// id, never the key) so the router-level filter can account the attempt
	// that answered; the router-level filter removes them before the client.
	// A response header map belongs to one attempt, so these are safe.
	HeaderBackend     = "x-swarmgate-backend"
	HeaderUpstreamKey = "x-swarmgate-upstream-key"
	// HeaderLocal marks a local reply the upstream ext_proc made (no key for
	// the attempt): the router-level filter knows it is already in the
	// client's error shape, accounts it and removes the marker.
	HeaderLocal = "x-swarmgate-local"
	// HeaderEstimated marks an answer the gateway estimated itself
	// (count_tokens for a model with no Anthropic backend).
	HeaderEstimated = "x-swarmgate-estimated"
	// HeaderRequestID is Envoy's request id (x-request-id). It is only a
	// correlation label: a client can choose it, so nothing is keyed on it;
	// the gateway's own identity is MetaRequestID.
	HeaderRequestID = "x-request-id"
)

// MetadataNamespace is the dynamic-metadata and endpoint-metadata namespace.
// The router-level ext_proc filter lists it in
// metadata_options.receiving_namespaces.untyped so Envoy keeps what we emit.
const MetadataNamespace = "swarmgate"

// Endpoint (host) metadata keys, under MetadataNamespace, that the upstream
// ext_proc reads through the xds.upstream_host_metadata attribute.
const (
	EndpointBackend       = "backend"        // backend name
	EndpointUpstreamModel = "upstream_model" // model name the backend expects
)

// Request metadata: what the router-level ext_proc admitted a request with,
// returned as dynamic metadata with the request-body answer (Envoy keeps it
// for receiving_namespaces and merges later answers into it per key).
//
// In MetadataNamespace, plain fields for Envoy's other filters: the
// rate-limit filter's metadata actions and hits_addend read them, at
// request time and at stream done.
const (
	MetaRequestID   = "rid"        // gateway-minted request identity
	MetaTenant      = "tenant"     // tenant name (rate-limit descriptor)
	MetaVirtualKey  = "vkey"       // virtual key id of the caller
	MetaModel       = "model"      // public model alias (descriptor)
	MetaEstTokens   = "est_tokens" // prompt-token estimate (hits_addend at request time)
	MetaMaxTokens   = "max_tokens" // output tokens reserved for this request
	MetaReservation = "reservation"
)

// AdmissionNamespace holds one string, MetaAdmission: the admission token
// the upstream filter of every attempt gets (forwarding_namespaces lists
// only this namespace). It is the request id, tenant, virtual key, model,
// sticky key, the client's :path, the backends that may serve it, the
// estimate, the output reservation, the body size and the issue time,
// length-prefixed, base64url, then "." and an HMAC-SHA256 (128 bits, hex)
// with identity.signing_key: a stream that did not come through admission
// gets no upstream key.
const (
	AdmissionNamespace = "swarmgate_admission"
	MetaAdmission      = "token"
)

// Dynamic metadata keys the router-level ext_proc emits on the response.
const (
	MetaPromptTokens     = "prompt_tokens"
	MetaCompletionTokens = "completion_tokens"
	MetaTotalTokens      = "total_tokens"
	// MetaTokensTopUp is what the token limit is charged at stream done:
	// completion tokens plus any prompt tokens above the request-time estimate
	// (hits_addend is unsigned, so the estimate can only be topped up).
	MetaTokensTopUp = "tokens_top_up"
)

// Upstream ext_proc attributes (request_attributes on the upstream filter).
const (
	AttrUpstreamHostMetadata = "xds.upstream_host_metadata"
	AttrAttemptCount         = "upstream.request_attempt_count"
)

// Rate-limit descriptor entry keys and the values of DescLimit.
const (
	DescTenant = "tenant"
	DescModel  = "model"
	DescKey    = "key"
	DescLimit  = "limit"

	LimitRPM = "rpm"
	LimitRPD = "rpd"
	LimitTPM = "tpm"
)

// Cluster names of swarmgate's own services in the generated Envoy config.
const (
	ClusterXDS       = "swarmgate_xds"
	ClusterExtProc   = "swarmgate_extproc"
	ClusterRateLimit = "swarmgate_ratelimit"
)

// PoolCluster is the Envoy cluster serving a model alias. Alias characters
// that stats names dislike are replaced, and a short hash keeps distinct
// aliases distinct after replacement.
func PoolCluster(model string) string {
	var b strings.Builder
	b.WriteString("pool_")
	clean := true
	for _, r := range model {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
			clean = false
		}
	}
	if !clean {
		sum := sha256.Sum256([]byte(model))
		b.WriteString("_" + hex.EncodeToString(sum[:4]))
	}
	return b.String()
}

// PoolContextCluster is the cluster serving a model alias restricted to the
// targets whose context window is at least minContext tokens (or unknown).
// ext_proc names it in HeaderPool when a prompt is too large for some of the
// alias's targets; minContext is always one of the targets' context windows,
// so the control plane generates one such cluster per distinct window above
// the smallest. minContext <= 0 is the unrestricted PoolCluster. The
// "poolctx<N>_" prefix cannot collide with PoolCluster's "pool_".
func PoolContextCluster(model string, minContext int) string {
	base := PoolCluster(model)
	if minContext <= 0 {
		return base
	}
	return "poolctx" + strconv.Itoa(minContext) + "_" + strings.TrimPrefix(base, "pool_")
}

// PoolFamilyCluster is the cluster serving a model alias restricted to the
// targets whose backend takes an API family (config.Family*), natively or
// translated, generated for each family that only some of the alias's
// targets take. The
// "poolfam_" prefix cannot collide with "pool_" or "poolctx<N>_".
func PoolFamilyCluster(model, family string) string {
	return "poolfam_" + family + "_" + strings.TrimPrefix(PoolCluster(model), "pool_")
}

// PoolNativeCluster is the cluster serving a model alias restricted to the
// targets whose backend speaks an API family natively, generated when other
// targets take the family only translated: a request the translator cannot
// express (or count_tokens) goes there. "poolnat_" cannot collide with the
// other prefixes.
func PoolNativeCluster(model, family string) string {
	return "poolnat_" + family + "_" + strings.TrimPrefix(PoolCluster(model), "pool_")
}

// PoolFamilyContextCluster is a family cluster (PoolNativeCluster when
// native, else PoolFamilyCluster) restricted further to the targets whose
// context window is at least minContext tokens (or unknown), as
// PoolContextCluster restricts the whole pool; minContext <= 0 is the
// family cluster itself. "poolfamctx<N>_" and "poolnatctx<N>_" cannot
// collide with the other prefixes.
func PoolFamilyContextCluster(model, family string, native bool, minContext int) string {
	base := PoolFamilyCluster(model, family)
	if native {
		base = PoolNativeCluster(model, family)
	}
	if minContext <= 0 {
		return base
	}
	prefix, rest, _ := strings.Cut(base, "_")
	return prefix + "ctx" + strconv.Itoa(minContext) + "_" + rest
}

// PoolBackendCluster is the cluster serving a model alias on one of its
// backends only: a Responses request naming a previous_response_id must
// reach the backend (and key) that created it, retries included. The
// backend name's length prefix keeps "poolbk<N>_" names unambiguous
// whatever the backend and alias contain.
func PoolBackendCluster(model, backend string) string {
	return "poolbk" + strconv.Itoa(len(backend)) + "_" + backend + "_" + strings.TrimPrefix(PoolCluster(model), "pool_")
}

// GRPCRoleHeader is gRPC initial metadata the generated ext_proc filters send
// (grpc_service.initial_metadata) so one ext_proc server tells the
// router-level stream from the per-attempt upstream stream.
const (
	GRPCRoleHeader = "x-swarmgate-role"
	RoleRouter     = "router"
	RoleUpstream   = "upstream"
)

// GRPCFleetSecretHeader is gRPC initial metadata Envoy sends to ext_proc
// with security.fleet_secret: the proof that a stream comes from the Envoy
// fleet when no client certificate can tell (plaintext behind a mesh).
const GRPCFleetSecretHeader = "x-swarmgate-fleet-secret"

// HeaderDroppedTools is a response header the upstream ext_proc sets on a
// translated attempt's answer: the hosted tools (by type, comma-separated)
// the translation dropped because the backend's family cannot run them
// (backends[].hosted_tools). Clients see it; nothing reads it back.
const HeaderDroppedTools = "x-swarmgate-dropped-tools"

// xDS node groups. The control plane keys snapshots by node cluster (node id
// when the cluster is empty): Envoy nodes use config.Envoy.NodeCluster; the
// rate-limit service and ext_proc replicas connect with these ids and get
// their own resource types.
const (
	NodeRateLimit = "swarmgate-ratelimit" // envoyproxy/ratelimit: RateLimitConfig
	NodeExtProc   = "swarmgate-extproc"   // ext_proc replicas: swarmgate.v1.GatewayConfig
)
