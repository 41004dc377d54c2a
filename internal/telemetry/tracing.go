package telemetry

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

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
// (TLS), sampled by sampler (nil: NewSampler(cfg.SampleRatio)). It does not
// dial: an unreachable collector costs dropped spans and a log line from
// the SDK, never a failed start. shutdown flushes pending spans; call it on
// exit.
func NewTracerProvider(ctx context.Context, cfg config.Telemetry, sampler *Sampler) (trace.TracerProvider, func(context.Context) error, error) {
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
	if sampler == nil {
		sampler = NewSampler(cfg.SampleRatio)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler),
	)
	return tp, tp.Shutdown, nil
}

// Sampler keeps traces that start here (root spans) at
// telemetry.sample_ratio, none at 0, and follows the caller's decision
// otherwise (the traceparent from Envoy). SetRatio changes the ratio while
// the provider runs, so the setting follows reloads.
type Sampler struct {
	s atomic.Pointer[sdktrace.Sampler]
}

// NewSampler returns a Sampler at ratio.
func NewSampler(ratio float64) *Sampler {
	s := &Sampler{}
	s.SetRatio(ratio)
	return s
}

// SetRatio sets the share of root spans kept: 0 (or anything not above 0,
// NaN included) keeps none, 1 or more every one.
func (s *Sampler) SetRatio(ratio float64) {
	root := sdktrace.NeverSample()
	switch {
	case ratio >= 1:
		root = sdktrace.AlwaysSample()
	case ratio > 0:
		root = sdktrace.TraceIDRatioBased(ratio)
	}
	pb := sdktrace.ParentBased(root)
	s.s.Store(&pb)
}

// ShouldSample implements sdktrace.Sampler.
func (s *Sampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	return (*s.s.Load()).ShouldSample(p)
}

// Description implements sdktrace.Sampler.
func (s *Sampler) Description() string { return (*s.s.Load()).Description() }

// ExtractTraceContext returns ctx carrying the remote span context found in
// headers (lower-case names, as ext_proc receives them), so the span of each
// ext_proc call joins the request's trace even when the two calls reach
// different replicas. The format is W3C trace context (traceparent,
// tracestate), what Envoy's OpenTelemetry tracer sends.
func ExtractTraceContext(ctx context.Context, headers map[string]string) context.Context {
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(headers))
}
