package extproc

import (
	"context"

	"github.com/swarmgate/swarmgate/internal/chatreq"
	"github.com/swarmgate/swarmgate/internal/telemetry"
)

// startSpan opens the request's GenAI span once it is admitted (refusals
// before that are counted in metrics and the access log, not traced). The
// parent is the trace Envoy propagated, so the router-level and upstream
// ext_proc calls, which may run on different replicas, join one trace.
func (s *Server) startSpan(r *routerStream, cr chatreq.Request, tenant string) {
	ctx := context.Background()
	if r.traceparent != "" {
		ctx = telemetry.ExtractTraceContext(ctx, map[string]string{"traceparent": r.traceparent, "tracestate": r.tracestate})
	}
	// The family names the span: /v1/messages is Anthropic's chat,
	// /v1/responses OpenAI's (docs/families.md).
	_, r.span = telemetry.StartGenAISpan(ctx, s.opts.Tracer, telemetry.GenAIRequest{RequestID: r.f.RequestID, System: r.f.Spec.Provider,
		Operation: r.f.Spec.Operation, Model: r.f.Alias, MaxTokens: cr.MaxTokens, Stream: cr.Stream, Tenant: tenant})
}
