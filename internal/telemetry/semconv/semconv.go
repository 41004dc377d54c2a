// Package semconv names the OpenTelemetry GenAI operations
// (gen_ai.operation.name well-known values,
// https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/). It
// imports nothing, so policy packages (extproc/family) can name an
// operation without depending on the telemetry exporters.
package semconv

// GenAI operation names.
const (
	OperationChat           = "chat"
	OperationTextCompletion = "text_completion"
	OperationEmbeddings     = "embeddings"
)
