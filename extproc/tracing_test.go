package extproc_test

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// An admitted request becomes one GenAI span that joins the trace Envoy
// propagated in traceparent and ends with the provider's usage.
func TestAdmittedRequestIsTraced(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	h := newHarness(t, testConfig(t), func(o *extproc.Options) { o.Tracer = tp.Tracer("test") })
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	st, cancel := h.stream(t, contract.RoleRouter)
	defer cancel()
	roundTrip(t, st, reqHeaders(false, ":method", "POST", ":path", "/v1/chat/completions", "authorization", "Bearer "+keyAlpha,
		contract.HeaderRequestID, "req-trace", "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01"))
	roundTrip(t, st, reqBody(`{"model":"chat","messages":[{"role":"user","content":"hello"}]}`))
	roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "application/json", contract.HeaderBackend, "big", contract.HeaderUpstreamKey, "big-2"))
	roundTrip(t, st, respBody(fixture(t, "openai_chat.json"), true))
	h.cap.waitEntry(t)

	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("ended spans: %d, want 1", len(spans))
	}
	sp := spans[0]
	if got := sp.SpanContext().TraceID().String(); got != traceID {
		t.Errorf("trace id %s, want the propagated %s", got, traceID)
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range sp.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	if attrs["gen_ai.request.model"].AsString() != "chat" || attrs["gen_ai.usage.input_tokens"].AsInt64() != 1117 ||
		attrs["gen_ai.usage.output_tokens"].AsInt64() != 46 {
		t.Errorf("attributes %v", attrs)
	}
	// The span keeps the name the backend was asked for; the answer names
	// the alias (TestAnswersNameTheAlias).
	if got := attrs["gen_ai.response.model"].AsString(); got != "vendor/chat-large" {
		t.Errorf("gen_ai.response.model %q, want the upstream model", got)
	}
}
