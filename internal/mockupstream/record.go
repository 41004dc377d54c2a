package mockupstream

import (
	"net/http"
	"time"
)

// Record is what the mock saw of one request. It never holds a credential
// value: KeyID is the configured id, KeyHash a short hash of what was
// presented.
type Record struct {
	Time     time.Time
	Method   string
	Path     string
	Endpoint string // chat, completions, embeddings, responses, messages, count_tokens, models, unknown
	Host     string // Host / :authority the request carried
	SNI      string // TLS server name, when served over TLS
	Proto    string // HTTP/1.1 or HTTP/2.0

	KeyID   string // "" when no or an unknown credential was presented
	KeyHash string // "sha256:" + first 16 hex digits of the presented credential

	Model        string
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
	MaxTokens    int  // max_tokens or max_completion_tokens, 0 when absent
	BodyBytes    int
	Body         []byte      // the request body, with Options.RecordBodies
	Headers      http.Header // selected request headers (Options.RecordHeaders)

	Status           int    // status sent (0 when reset before headers)
	Outcome          string // ok, unauthorized, bad_request, rate_limit, rpm_limit, tpm_limit, error, reset, reset_mid_stream, canceled
	Chunks           int    // SSE data chunks sent, [DONE] excluded
	PromptTokens     int    // every prompt token, cached and cache writes included
	CompletionTokens int    // reasoning included
	CachedTokens     int    // prompt tokens read from the cache
	CacheWriteTokens int    // prompt tokens written to the cache (Anthropic)
	ReasoningTokens  int
	ResponseID       string // the Responses API id created

	// Chat completions and Anthropic Messages (and, for ToolCalls and
	// ToolResults, the Responses API).
	ToolCalls   int  // tool calls answered (Options.ToolCalls, Options.ToolScript)
	ToolResults int  // tool results in the request: chat role "tool" messages, Anthropic tool_result blocks, Responses *call_output items
	SawImage    bool // an image part: chat image_url, Anthropic image (also inside a tool_result)
}

// Counters count requests of one key by outcome.
type Counters struct {
	Requests     int
	OK           int
	RateLimited  int // 429 for any reason
	Errors       int // 5xx and other error statuses sent on purpose
	Resets       int // reset and reset mid-stream
	Unauthorized int
	Canceled     int // client went away before the answer was complete
}

func (c *Counters) add(r *Record) {
	c.Requests++
	switch r.Outcome {
	case "ok":
		c.OK++
	case "rate_limit", "rpm_limit", "tpm_limit":
		c.RateLimited++
	case "error":
		c.Errors++
	case "reset", "reset_mid_stream":
		c.Resets++
	case "unauthorized":
		c.Unauthorized++
	case "canceled":
		c.Canceled++
	}
}

func (c *Counters) merge(o Counters) {
	c.Requests += o.Requests
	c.OK += o.OK
	c.RateLimited += o.RateLimited
	c.Errors += o.Errors
	c.Resets += o.Resets
	c.Unauthorized += o.Unauthorized
	c.Canceled += o.Canceled
}

func cloneRecord(r *Record) Record {
	c := *r
	c.Headers = r.Headers.Clone()
	return c
}
