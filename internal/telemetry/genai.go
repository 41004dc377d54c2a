package telemetry

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/swarmgate/swarmgate/internal/telemetry/semconv"
)

// OpenTelemetry GenAI semantic-convention attribute names
// (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/). They
// are spelled out here rather than imported from a semconv package so a
// semconv upgrade cannot rename what dashboards query.
const (
	// AttrGenAISystem is the older name of AttrGenAIProviderName; both are
	// set so backends on either side of the rename find it.
	AttrGenAISystem                = "gen_ai.system"
	AttrGenAIProviderName          = "gen_ai.provider.name"
	AttrGenAIOperationName         = "gen_ai.operation.name"
	AttrGenAIRequestModel          = "gen_ai.request.model"
	AttrGenAIRequestMaxTokens      = "gen_ai.request.max_tokens"
	AttrGenAIResponseModel         = "gen_ai.response.model"
	AttrGenAIResponseID            = "gen_ai.response.id"
	AttrGenAIResponseFinishReasons = "gen_ai.response.finish_reasons"
	AttrGenAIUsageInputTokens      = "gen_ai.usage.input_tokens"
	AttrGenAIUsageOutputTokens     = "gen_ai.usage.output_tokens"
	AttrGenAIUsageCacheReadTokens  = "gen_ai.usage.cache_read.input_tokens"
	AttrServerAddress              = "server.address"
	AttrErrorType                  = "error.type"
	AttrHTTPResponseStatusCode     = "http.response.status_code"

	// swarmgate's own attributes (no semconv equivalent).
	AttrTenant    = "swarmgate.tenant"
	AttrBackend   = "swarmgate.backend"
	AttrKeyID     = "swarmgate.key_id" // upstream key id, never the key
	AttrAttempts  = "swarmgate.attempts"
	AttrStream    = "swarmgate.stream"
	AttrRequestID = "swarmgate.request_id"
	AttrCost      = "swarmgate.cost"
)

// GenAI operation names (gen_ai.operation.name well-known values).
const (
	OperationChat           = semconv.OperationChat
	OperationTextCompletion = semconv.OperationTextCompletion
	OperationEmbeddings     = semconv.OperationEmbeddings
)

// GenAIRequest is what is known about a request before it goes upstream.
type GenAIRequest struct {
	RequestID string
	System    string // provider: "openai", "anthropic", ... (backend api_style)
	Operation string // OperationChat, ...
	Model     string // model alias the client asked for
	MaxTokens int
	Stream    bool
	Tenant    string
}

// Attributes returns the span attributes of r; empty fields are left out.
func (r GenAIRequest) Attributes() []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 9)
	if r.System != "" {
		a = append(a, attribute.String(AttrGenAISystem, r.System), attribute.String(AttrGenAIProviderName, r.System))
	}
	if r.Operation != "" {
		a = append(a, attribute.String(AttrGenAIOperationName, r.Operation))
	}
	if r.Model != "" {
		a = append(a, attribute.String(AttrGenAIRequestModel, r.Model))
	}
	if r.MaxTokens > 0 {
		a = append(a, attribute.Int(AttrGenAIRequestMaxTokens, r.MaxTokens))
	}
	if r.Tenant != "" {
		a = append(a, attribute.String(AttrTenant, r.Tenant))
	}
	if r.RequestID != "" {
		a = append(a, attribute.String(AttrRequestID, r.RequestID))
	}
	return append(a, attribute.Bool(AttrStream, r.Stream))
}

// GenAIResponse is what is known when a request ends.
type GenAIResponse struct {
	Model         string // model the provider says answered
	ID            string // provider's response id
	FinishReasons []string
	Tokens        Tokens
	Status        int
	Backend       string
	ServerAddress string // upstream host
	KeyID         string
	Attempts      int
	Cost          float64
	// ErrorType is set for failed requests: a low-cardinality class such as
	// "rate_limited", "budget_exhausted", "upstream_5xx", "timeout".
	ErrorType string
}

// Attributes returns the span attributes of r; empty fields are left out.
func (r GenAIResponse) Attributes() []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 14)
	if r.Model != "" {
		a = append(a, attribute.String(AttrGenAIResponseModel, r.Model))
	}
	if r.ID != "" {
		a = append(a, attribute.String(AttrGenAIResponseID, r.ID))
	}
	if len(r.FinishReasons) > 0 {
		a = append(a, attribute.StringSlice(AttrGenAIResponseFinishReasons, r.FinishReasons))
	}
	a = append(a,
		attribute.Int64(AttrGenAIUsageInputTokens, r.Tokens.Input),
		attribute.Int64(AttrGenAIUsageOutputTokens, r.Tokens.Output),
	)
	if r.Tokens.CachedInput > 0 {
		a = append(a, attribute.Int64(AttrGenAIUsageCacheReadTokens, r.Tokens.CachedInput))
	}
	if r.Status != 0 {
		a = append(a, attribute.Int(AttrHTTPResponseStatusCode, r.Status))
	}
	if r.Backend != "" {
		a = append(a, attribute.String(AttrBackend, r.Backend))
	}
	if r.ServerAddress != "" {
		a = append(a, attribute.String(AttrServerAddress, r.ServerAddress))
	}
	if r.KeyID != "" {
		a = append(a, attribute.String(AttrKeyID, r.KeyID))
	}
	if r.Attempts > 0 {
		a = append(a, attribute.Int(AttrAttempts, r.Attempts))
	}
	if r.Cost > 0 {
		a = append(a, attribute.Float64(AttrCost, r.Cost))
	}
	if r.ErrorType != "" {
		a = append(a, attribute.String(AttrErrorType, r.ErrorType))
	}
	return a
}

// SpanName is the GenAI span name: "{operation} {model}", or the operation
// alone when the model is unknown.
func SpanName(operation, model string) string {
	if model == "" {
		return operation
	}
	return operation + " " + model
}

// StartGenAISpan starts the client span for one model call, named and
// attributed per the GenAI conventions.
func StartGenAISpan(ctx context.Context, tracer trace.Tracer, r GenAIRequest) (context.Context, trace.Span) {
	op := r.Operation
	if op == "" {
		op = OperationChat
	}
	return tracer.Start(ctx, SpanName(op, r.Model),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(r.Attributes()...))
}

// EndGenAISpan records the response on span and ends it; a status of 400 or
// more or an ErrorType marks the span as an error.
func EndGenAISpan(span trace.Span, r GenAIResponse) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(r.Attributes()...)
	if r.Status >= 400 || r.ErrorType != "" {
		desc := r.ErrorType
		if desc == "" {
			desc = "http status " + strconv.Itoa(r.Status)
		}
		span.SetStatus(codes.Error, desc)
	}
	span.End()
}
