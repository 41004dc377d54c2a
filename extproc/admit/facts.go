// Package admit is the router-level filter's admission: small steps over
// one request's Facts, each a function a test can call without a stream.
//
//	Authenticate  the virtual key (Authorization: Bearer, x-api-key)
//	Endpoint      the path, method and declared size
//	Scan          the body: model, tenant rights, the family's rules,
//	              previous_response_id, prompt estimate and output reserve
//	(route)       the pool, chosen by extproc from the Facts
//	Wait          usable upstream keys, queueing for capacity that comes back
//	Budget        a hard-capped monthly budget
//	Reserve       tokens (and budget money), queueing for a TPM window
//
// A step either fills the Facts and returns nil, or returns a Refusal:
// the status, OpenAI error type and code, message and Retry-After the
// client gets, which extproc renders in the client's API shape. The
// collaborators (key pool, queue, budgets, reserver, affinity store) are
// the small interfaces below, defined here at the consumer. Nothing here
// knows Envoy or gRPC (TestNoEnvoyImports).
package admit

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/internal/config"
)

// Facts is what the gateway knows of one request, filled step by step.
// It is reused per pooled stream (Reset).
type Facts struct {
	// RequestID is the gateway's own id (sg-…); ClientID the x-request-id
	// the client sent, a label only.
	RequestID, ClientID string
	// RawPath is :path as sent (query included); Path without the query.
	RawPath, Path string
	// Spec is the path's API family (nil: not served); Shape the error
	// shape refusals use (Anthropic's under /v1/messages, or for the model
	// list asked with anthropic-version).
	Spec  *family.Spec
	Shape family.ErrorShape
	// Owner is the tenant and virtual key (Authenticate).
	Owner config.KeyOwner
	// AnthropicVersion/-Beta are the client's headers, carried in the
	// admission so each attempt sets them for Anthropic-style backends.
	AnthropicVersion, AnthropicBeta string
	// Sticky is the request.sticky_header value (a label).
	Sticky string

	// From the body (Scan).
	Alias       string        // the model the client asked for
	Model       *config.Model // set once the request is sized
	Stream      bool
	ClientUsage bool // the client asked for include_usage itself
	HasTools    bool
	MaxTokens   int // the output cap the client asked for (0: none)
	EstTokens   int // prompt estimate
	MaxOut      int // output tokens reserved
	// Pinned is the backend and key that created the request's
	// previous_response_id (Responses API); zero when none.
	Pinned ResponseOwner

	// The route: Pool is the cluster Envoy routes to; Backends the
	// backends that may serve the request; Restricted when they are only
	// some of the model's (the admission then lists them).
	Pool       string
	Backends   []string
	Restricted bool

	// Reservation is the token reservation, when Reserved.
	Reservation Reservation
	Reserved    bool
	// Admitted: every step passed.
	Admitted bool
}

// Reset clears f for the next request, keeping its buffers.
func (f *Facts) Reset() {
	*f = Facts{Backends: f.Backends[:0]}
}

// Tenant is the tenant's name ("" before Authenticate).
func (f *Facts) Tenant() string {
	if f.Owner.Tenant == nil {
		return ""
	}
	return f.Owner.Tenant.Name
}

// KeyID is the virtual key's id ("" before Authenticate).
func (f *Facts) KeyID() string {
	if f.Owner.Key == nil {
		return ""
	}
	return f.Owner.Key.ID
}

// KeyLabels are the virtual key's labels (a sub-key's; nil otherwise).
func (f *Facts) KeyLabels() map[string]string {
	if f.Owner.Key == nil {
		return nil
	}
	return f.Owner.Key.Labels
}

// Need is the tokens a target's context window must hold.
func (f *Facts) Need() int { return f.EstTokens + f.MaxOut }

// Long reports a long job (the route with the long timeout): tools with
// request.long_when_tools, an output cap at request.long_max_tokens or
// more, or a long_running model.
func (f *Facts) Long(cfg *config.Config) bool {
	rq := cfg.Request
	return (f.HasTools && rq.LongWhenTools) || (f.MaxTokens >= rq.LongMaxTokens && rq.LongMaxTokens > 0) || f.Model.LongRunning
}

// StickyKey is what keeps the request on one upstream key: the sticky
// header's value, else <tenant>/<key id> for sticky tenants; bounded (long
// values are hashed).
func (f *Facts) StickyKey() string {
	v := f.Sticky
	if v == "" && f.Owner.Tenant.Sticky {
		v = f.Owner.Tenant.Name + "/" + f.Owner.Key.ID
	}
	if len(v) <= 128 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "h:" + hex.EncodeToString(sum[:16])
}
