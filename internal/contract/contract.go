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

// Sub-key limits, in MetadataNamespace, present only for a sub-key with
// that limit (config keys never carry them): the decimal limit as a string,
// because the rate-limit filter's metadata action reads string values only.
// Each is the DescQuota entry of the sub-key's descriptor for that limit;
// when it is absent Envoy does not send the descriptor.
const (
	MetaSubkeyRPM = "subkey_rpm"
	MetaSubkeyRPD = "subkey_rpd"
	MetaSubkeyTPM = "subkey_tpm"
)

// The minting key's limits, for a sub-key minted by a sub-key that has
// limits: MetaParentKey is the minter's id (the DescSubkey entry of its
// descriptors), the others its limits as above. The minter's windows
// count its own requests and every key's it minted.
const (
	MetaParentKey = "parent_key"
	MetaParentRPM = "parent_rpm"
	MetaParentRPD = "parent_rpd"
	MetaParentTPM = "parent_tpm"
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
	// DescSubkey names a sub-key (its id); DescQuota, the descriptor's last
	// entry, carries its limit. The rate-limit service turns the quota
	// into the descriptor's limit override and drops the entry, so sub-keys
	// need no entry in the service's config.
	DescSubkey = "subkey"
	DescQuota  = "quota"

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

// Pool is one Envoy cluster serving a model alias: the alias's targets,
// restricted by the fields that are set. internal/routing decides which
// pools a model has and which one a request goes to; this names them, for
// the control plane (cluster names) and ext_proc (HeaderPool) alike.
type Pool struct {
	Alias string
	// Family restricts the pool to the targets whose backend takes this
	// API family (config.Family*), natively or translated; with Native,
	// natively only.
	Family string
	Native bool
	// MinContext restricts the pool to the targets whose context window is
	// at least this many tokens, or unknown; 0 for any window.
	MinContext int
	// Backend restricts the pool to one backend's targets: a Responses
	// request naming a previous_response_id must reach the backend (and
	// key) that created it, retries included. It takes precedence in the
	// name.
	Backend string
}

// Cluster is the pool's cluster name. Alias characters that stats names
// dislike are replaced, and a short hash keeps distinct aliases distinct
// after replacement. Each restriction has its own prefix, so no two pools
// share a name:
//
//	pool_<alias>                       every target
//	poolctx<N>_<alias>                 context window at least N (or unknown)
//	poolfam_<family>_<alias>           targets taking the family
//	poolnat_<family>_<alias>           targets speaking it natively
//	poolfamctx<N>_, poolnatctx<N>_     ... with a context window at least N
//	poolbk<len>_<backend>_<alias>      one backend (its name's length keeps
//	                                   the name unambiguous)
func (p Pool) Cluster() string {
	var b strings.Builder
	switch {
	case p.Backend != "":
		b.WriteString("poolbk")
		b.WriteString(strconv.Itoa(len(p.Backend)))
		b.WriteByte('_')
		b.WriteString(p.Backend)
		b.WriteByte('_')
	case p.Family != "":
		if p.Native {
			b.WriteString("poolnat")
		} else {
			b.WriteString("poolfam")
		}
		if p.MinContext > 0 {
			b.WriteString("ctx")
			b.WriteString(strconv.Itoa(p.MinContext))
		}
		b.WriteByte('_')
		b.WriteString(p.Family)
		b.WriteByte('_')
	case p.MinContext > 0:
		b.WriteString("poolctx")
		b.WriteString(strconv.Itoa(p.MinContext))
		b.WriteByte('_')
	default:
		b.WriteString("pool_")
	}
	clean := true
	for _, r := range p.Alias {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
			clean = false
		}
	}
	if !clean {
		sum := sha256.Sum256([]byte(p.Alias))
		b.WriteString("_" + hex.EncodeToString(sum[:4]))
	}
	return b.String()
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

// Capacity is what a backend's keys can take, as the key pools report it to
// the control plane, which weights the pools' localities by it (both per
// minute): Attempts is what the keys accept plus what they refuse while
// their windows have room (a key refusing half its requests takes twice its
// window's rate in attempts), Refused the part of those refused, which
// Envoy retries on another host.
type Capacity struct {
	Attempts, Refused float64
}

// MaxXDSMessageBytes bounds one xDS response the gateway's own xDS clients
// (ext_proc replicas with --from-xds, the rate-limit service) accept.
// grpc-go's default of 4 MiB is below what a large config produces: the
// GatewayConfig of 100 models × 3 backends × 200 keys is 5.4 MB, of 1,000
// models 7 MB, and the RateLimitConfig of 60,000 keys 3.6 MB. The server is
// the gateway's own control plane, reached over mutual TLS off loopback.
const MaxXDSMessageBytes = 256 << 20
