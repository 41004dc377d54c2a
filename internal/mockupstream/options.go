package mockupstream

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Key is one API key the mock accepts. ID is what records, counters and the
// x-mock-key-id response header carry; Value is never logged or recorded.
type Key struct {
	ID    string
	Value string
}

// Options configure a Server. The zero value is usable: bearer auth, any
// credential accepted, 16 completion tokens, no delays.
type Options struct {
	// Auth is where the credential is read from: bearer (Authorization:
	// Bearer), x-api-key or api-key. Default bearer.
	Auth config.AuthStyle
	// Keys are the accepted credentials. When empty, any non-empty
	// credential is accepted and recorded under the id "any".
	Keys []Key

	// TTFT is the delay before the first streamed chunk (for a JSON answer,
	// before the answer; a JSON answer also waits the inter-token delays it
	// would have streamed).
	TTFT time.Duration
	// InterTokenDelay is the delay between two streamed chunks.
	InterTokenDelay time.Duration
	// TokensPerChunk is how many completion tokens each content chunk
	// carries. Default 1.
	TokensPerChunk int

	// CompletionTokens is the completion length when the request names no
	// smaller max_tokens / max_completion_tokens and carries no
	// x-mock-completion-tokens header. Default 16.
	CompletionTokens int
	// CachedTokens and ReasoningTokens, when positive, are reported in
	// usage.prompt_tokens_details.cached_tokens (capped at prompt_tokens)
	// and usage.completion_tokens_details.reasoning_tokens (capped at
	// completion_tokens). Headers x-mock-cached-tokens and
	// x-mock-reasoning-tokens override them per request.
	CachedTokens    int
	ReasoningTokens int
	// CacheWriteTokens, when positive, are reported on Anthropic Messages
	// as cache_creation_input_tokens (capped at the uncached prompt);
	// header x-mock-cache-write-tokens overrides it per request. Anthropic
	// answers report no reasoning tokens.
	CacheWriteTokens int
	// BytesPerToken is the prompt-token formula's divisor: prompt_tokens =
	// ceil(text bytes / BytesPerToken), at least 1. Default 4.
	BytesPerToken int
	// EmbeddingDims is the length of each embedding unless the request asks
	// for "dimensions". Default 8.
	EmbeddingDims int

	// ToolCalls makes chat completions and Anthropic Messages answer a
	// request that declares tools, and whose last turn is not a tool
	// result, with two parallel calls of the first declared tool
	// (arguments ToolCallArguments, finish_reason tool_calls / stop_reason
	// tool_use); see tools.go. Off, tools are ignored as before.
	ToolCalls bool
	// ToolScript lets an agent finish a task (agent.go): a request whose
	// tools include one named here (a Responses namespace's function as
	// "<namespace>.<name>"), and whose last turn is not a tool result, is
	// answered with one call of the first such tool, with these arguments
	// (a JSON object); after the tool result, with text. Chat completions,
	// Anthropic Messages and the Responses API, JSON and SSE. It takes
	// precedence over ToolCalls.
	ToolScript map[string]string

	// Models is what GET /v1/models lists. Default ["gpt-4o-mini"].
	Models []string
	// StrictModels answers 404 model_not_found for a model not in Models.
	StrictModels bool

	// Default is the behaviour of keys without their own (SetBehavior).
	Default Behavior
	// Seed seeds the RNG behind Behavior.FailProbability (deterministic runs).
	Seed uint64

	// MaxBodyBytes bounds the request body read. Default 256 MiB.
	MaxBodyBytes int64
	// MaxRecords bounds the records kept (oldest dropped first; counters
	// still count dropped ones). Default 100000.
	MaxRecords int
	// RecordHeaders are request headers copied into each Record besides the
	// defaults (x-request-id, x-session-id, user-agent, content-type and
	// every x-swarmgate-* header). Credential headers are never recorded.
	RecordHeaders []string
	// RecordBodies keeps each request's body in its Record (tests that
	// check what reached the provider; bodies carry no credentials).
	RecordBodies bool

	// TLS, when set, makes Start serve HTTPS (Record.SNI tells the server
	// name the client asked for).
	TLS *tls.Config
	// H2C also serves cleartext HTTP/2 (prior knowledge), as Envoy does
	// with an http2 cluster.
	H2C bool

	// Logger receives one debug line per request (key id, never the key).
	// Nil discards.
	Logger *slog.Logger
	// Now is the clock for RPM/TPM windows. Default time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Auth == "" {
		o.Auth = config.AuthBearer
	}
	if o.TokensPerChunk <= 0 {
		o.TokensPerChunk = 1
	}
	if o.CompletionTokens <= 0 {
		o.CompletionTokens = 16
	}
	if o.BytesPerToken <= 0 {
		o.BytesPerToken = 4
	}
	if o.EmbeddingDims <= 0 {
		o.EmbeddingDims = 8
	}
	if len(o.Models) == 0 {
		o.Models = []string{"gpt-4o-mini"}
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 256 << 20
	}
	if o.MaxRecords <= 0 {
		o.MaxRecords = 100000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}
