package telemetry

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/swarmgate/swarmgate/internal/config"
)

// ServiceName is the OpenTelemetry service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES say otherwise.
const ServiceName = "swarmgate"

// TracerName names swarmgate's tracer (instrumentation scope).
const TracerName = "github.com/swarmgate/swarmgate"

// NewTracerProvider returns the process's tracer provider. With no
// cfg.OTLPEndpoint tracing is off: a no-op provider and a no-op shutdown.
// Otherwise spans are batched to an OTLP/gRPC collector at the endpoint:
// "host:port" or "http://host:port" (plaintext) or "https://host:port"
// (TLS), sampled at cfg.SampleRatio, honouring the caller's sampling
// decision (traceparent from Envoy). It does not dial: an unreachable
// collector costs dropped spans and a log line from the SDK, never a failed
// start. shutdown flushes pending spans; call it on exit.
func NewTracerProvider(ctx context.Context, cfg config.Telemetry) (trace.TracerProvider, func(context.Context) error, error) {
	if cfg.OTLPEndpoint == "" {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	var opt otlptracegrpc.Option
	switch ep := cfg.OTLPEndpoint; {
	case strings.HasPrefix(ep, "https://"), strings.HasPrefix(ep, "http://"):
		// WithEndpointURL picks TLS from the scheme.
		opt = otlptracegrpc.WithEndpointURL(ep)
	default:
		opt = otlptracegrpc.WithEndpoint(ep)
	}
	opts := []otlptracegrpc.Option{opt}
	if !strings.HasPrefix(cfg.OTLPEndpoint, "https://") {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp trace exporter for %s: %w", cfg.OTLPEndpoint, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", ServiceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // after ours: OTEL_SERVICE_NAME wins
	)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, nil, fmt.Errorf("trace resource: %w", err)
	}
	ratio := cfg.SampleRatio
	if ratio <= 0 || ratio > 1 {
		ratio = 1
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	)
	return tp, tp.Shutdown, nil
}

// ExtractTraceContext returns ctx carrying the remote span context found in
// headers (lower-case names, as ext_proc receives them), so the span of each
// ext_proc call joins the request's trace even when the two calls reach
// different replicas. The format is W3C trace context (traceparent,
// tracestate), what Envoy's OpenTelemetry tracer sends.
func ExtractTraceContext(ctx context.Context, headers map[string]string) context.Context {
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(headers))
}
