package telemetry

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/swarmgate/swarmgate/internal/config"
)

// AccessLogMessage is the msg of every access-log line, so log pipelines
// can select them.
const AccessLogMessage = "request"

// RequestLog is one access-log line: what happened to one client request,
// over all of its upstream attempts. It never holds a credential: KeyID and
// VirtualKeyID are the ids from the config.
type RequestLog struct {
	RequestID string // the gateway's own request identity
	// ClientRequestID is the x-request-id the request arrived with: a
	// correlation label only (a client may choose or reuse it).
	ClientRequestID string
	Tenant          string
	VirtualKeyID    string // caller's virtual key id
	Model           string // public model alias asked for
	// UpstreamModel is the model the backend was asked for (the target's
	// model name), which answers name only when the backend exposes it.
	UpstreamModel string
	// UpstreamRequestID is the provider's own id for its answer (its
	// x-request-id or request-id), which the client does not see: the
	// answer carries RequestID under those names.
	UpstreamRequestID string
	Backend           string // backend of the last attempt
	KeyID             string // upstream API key id of the last attempt
	Attempts          int
	Status            int // HTTP status sent to the client; 0: none
	Stream            bool
	Tokens            Tokens
	Cost              float64
	Latency           time.Duration
	TTFT              time.Duration // streams only
	// Reason says why a request was refused or failed ("budget exhausted",
	// "all keys open"); empty on success.
	Reason string

	// Bodies are logged only by an AccessLog with debug bodies on, and then
	// redacted; LogRequest ignores them.
	RequestBody  []byte
	ResponseBody []byte
}

// maxLoggedField bounds a logged value the client chose: the model it asked
// for is the body's "model" string as sent, unbounded on a refusal (an
// unknown model of megabytes would be a line that size per request).
const maxLoggedField = 256

// clipField cuts s to maxLoggedField bytes on a rune boundary, marked.
func clipField(s string) string {
	if len(s) <= maxLoggedField {
		return s
	}
	n := maxLoggedField
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// LogRequest writes r as one structured line at info level (warn for a 5xx
// or no status at all). Bodies are never written; see AccessLog for debug
// bodies.
func LogRequest(logger *slog.Logger, r RequestLog) {
	logRequest(logger, r, nil)
}

func logRequest(logger *slog.Logger, r RequestLog, extra []slog.Attr) {
	if logger == nil {
		return
	}
	level := slog.LevelInfo
	if r.Status >= 500 || r.Status == 0 {
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if !logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 18+len(extra))
	attrs = append(attrs,
		slog.String("request_id", r.RequestID),
		slog.String("client_request_id", r.ClientRequestID),
		slog.String("tenant", r.Tenant),
		slog.String("virtual_key_id", r.VirtualKeyID),
		slog.String("model", clipField(r.Model)),
		slog.String("upstream_model", r.UpstreamModel),
		slog.String("backend", r.Backend),
		slog.String("key_id", r.KeyID),
		slog.Int("attempts", r.Attempts),
		slog.Int("status", r.Status),
		slog.Bool("stream", r.Stream),
		slog.Int64("input_tokens", r.Tokens.Input),
		slog.Int64("output_tokens", r.Tokens.Output),
		slog.Int64("cached_input_tokens", r.Tokens.CachedInput),
		slog.Int64("reasoning_tokens", r.Tokens.Reasoning),
		slog.Float64("cost", r.Cost),
		slog.Float64("latency_ms", float64(r.Latency)/float64(time.Millisecond)),
	)
	if r.TTFT > 0 {
		attrs = append(attrs, slog.Float64("ttft_ms", float64(r.TTFT)/float64(time.Millisecond)))
	}
	if r.UpstreamRequestID != "" {
		attrs = append(attrs, slog.String("upstream_request_id", r.UpstreamRequestID))
	}
	if r.Reason != "" {
		attrs = append(attrs, slog.String("reason", r.Reason))
	}
	attrs = append(attrs, extra...)
	logger.LogAttrs(ctx, level, AccessLogMessage, attrs...)
}

// DefaultMaxLoggedBody bounds each logged body in debug mode.
const DefaultMaxLoggedBody = 64 << 10

// AccessLog writes access-log lines as config.Telemetry says: nothing when
// access_log is off, and redacted bodies only when debug_bodies is on.
// Both settings follow config reloads (SetConfig).
type AccessLog struct {
	logger      *slog.Logger
	enabled     atomic.Bool
	debugBodies atomic.Bool
	maxBody     int
}

// NewAccessLog returns an access log writing to logger. Use a JSON handler
// (slog.NewJSONHandler) for one JSON object per line.
func NewAccessLog(logger *slog.Logger, cfg config.Telemetry) *AccessLog {
	a := &AccessLog{logger: logger, maxBody: DefaultMaxLoggedBody}
	a.SetConfig(cfg)
	return a
}

// SetConfig applies telemetry.access_log and telemetry.debug_bodies from a
// reloaded config; requests already logging finish with the old settings.
func (a *AccessLog) SetConfig(cfg config.Telemetry) {
	if a == nil {
		return
	}
	a.enabled.Store(cfg.AccessLog)
	a.debugBodies.Store(cfg.DebugBodies)
}

// Log writes r. With debug bodies on, it adds request_body and
// response_body, cut to DefaultMaxLoggedBody and passed through RedactBody.
func (a *AccessLog) Log(r RequestLog) {
	if a == nil || !a.enabled.Load() {
		return
	}
	if !a.debugBodies.Load() {
		logRequest(a.logger, r, nil)
		return
	}
	var extra []slog.Attr
	if len(r.RequestBody) > 0 {
		extra = append(extra, slog.String("request_body", RedactBody(cut(r.RequestBody, a.maxBody))))
	}
	if len(r.ResponseBody) > 0 {
		extra = append(extra, slog.String("response_body", RedactBody(cut(r.ResponseBody, a.maxBody))))
	}
	logRequest(a.logger, r, extra)
}

// cut bounds a body. The redactor runs after the cut, so a credential split
// by it may lose its recognisable shape: cut back to a whitespace or
// punctuation boundary so no partial token is left at the end.
func cut(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	b = b[:n]
	for i := len(b) - 1; i >= 0 && i > n-256; i-- {
		switch b[i] {
		case ' ', '\n', '\t', ',', '"', '{', '}', '[', ']':
			return b[:i+1]
		}
	}
	return b[:0]
}
