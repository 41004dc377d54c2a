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

// Internal request headers. ext_proc strips every client-supplied header with
// HeaderPrefix before it sets its own, so none of them can be spoofed; the
// upstream filter removes them before the request leaves Envoy.
const (
	HeaderPrefix    = "x-swarmgate-"
	HeaderTenant    = "x-swarmgate-tenant"     // tenant name (rate-limit descriptor)
	HeaderKeyID     = "x-swarmgate-key-id"     // virtual key id of the caller
	HeaderModel     = "x-swarmgate-model"      // public model alias (descriptor)
	HeaderPool      = "x-swarmgate-pool"       // cluster the route must pick
	HeaderEstTokens = "x-swarmgate-est-tokens" // prompt-token estimate (hits_addend at request time)
	HeaderLong      = "x-swarmgate-long"       // "1": long job, longer route timeout
	HeaderSticky    = "x-swarmgate-sticky"     // stickiness key for upstream key choice
	HeaderMaxTokens = "x-swarmgate-max-tokens" // output tokens reserved for this request
	// HeaderReservation carries the reservation id from admission to settle.
	HeaderReservation = "x-swarmgate-reservation"
	// HeaderBackend and HeaderUpstreamKey are response headers the upstream
	// ext_proc adds on each attempt's response (backend name and upstream key
	// id, never the key) so the router-level filter can account the attempt
	// that answered; the router-level filter removes them before the client.
	HeaderBackend     = "x-swarmgate-backend"
	HeaderUpstreamKey = "x-swarmgate-upstream-key"
	// HeaderRetry is set by the upstream ext_proc on the response of an
	// attempt it had to send without a key. The route's retry policy lists
	// it in retriable_headers, so Envoy retries the attempt (another key or
	// priority) instead of handing the client the provider's 401.
	HeaderRetry = "x-swarmgate-retry"
	// HeaderRequestID is Envoy's request id (x-request-id), shared by both
	// ext_proc calls of one request and all its attempts.
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

// xDS node groups. The control plane keys snapshots by node cluster (node id
// when the cluster is empty): Envoy nodes use config.Envoy.NodeCluster; the
// rate-limit service and ext_proc replicas connect with these ids and get
// their own resource types.
const (
	NodeRateLimit = "swarmgate-ratelimit" // envoyproxy/ratelimit: RateLimitConfig
	NodeExtProc   = "swarmgate-extproc"   // ext_proc replicas: swarmgate.v1.GatewayConfig
)
