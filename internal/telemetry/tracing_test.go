package telemetry

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/swarmgate/swarmgate/internal/config"
)

// otlpReceiver is a real OTLP/gRPC trace endpoint on loopback that keeps
// what it receives.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	got   chan struct{}
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	r.mu.Unlock()
	select {
	case r.got <- struct{}{}:
	default:
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func startReceiver(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{got: make(chan struct{}, 1)}
	s := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(s, r)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return r, lis.Addr().String()
}

func TestTracerProviderOff(t *testing.T) {
	tp, shutdown, err := NewTracerProvider(context.Background(), config.Telemetry{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, span := StartGenAISpan(context.Background(), tp.Tracer(TracerName), GenAIRequest{Model: "m1"})
	if span.IsRecording() {
		t.Error("span recording with tracing off")
	}
	EndGenAISpan(span, GenAIResponse{Status: 200})
	if err := shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestTracerProviderExportsGenAISpan(t *testing.T) {
	for _, scheme := range []string{"", "http://"} {
		t.Run("endpoint "+scheme+"host:port", func(t *testing.T) {
			recv, addr := startReceiver(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			tp, shutdown, err := NewTracerProvider(ctx, config.Telemetry{OTLPEndpoint: scheme + addr, SampleRatio: 1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Envoy's traceparent: our span must join that trace.
			parent := ExtractTraceContext(ctx, map[string]string{
				"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			})
			_, span := StartGenAISpan(parent, tp.Tracer(TracerName), GenAIRequest{
				RequestID: "req-9", System: "openai", Operation: OperationChat, Model: "m1", MaxTokens: 256, Stream: true, Tenant: "alpha",
			})
			EndGenAISpan(span, GenAIResponse{
				Model: "gpt-4o-mini-2024-07-18", ID: "chatcmpl-1", FinishReasons: []string{"stop"},
				Tokens: Tokens{Input: 12, Output: 34}, Status: 429, Backend: "b1", KeyID: "b1-k1", Attempts: 3,
			})
			if err := shutdown(ctx); err != nil { // flushes the batch
				t.Fatalf("shutdown: %v", err)
			}
			select {
			case <-recv.got:
			case <-ctx.Done():
				t.Fatal("no span exported")
			}
			recv.mu.Lock()
			defer recv.mu.Unlock()
			if len(recv.spans) != 1 {
				t.Fatalf("%d spans, want 1", len(recv.spans))
			}
			s := recv.spans[0]
			if s.GetName() != "chat m1" || s.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
				t.Errorf("span %q kind %v", s.GetName(), s.GetKind())
			}
			if got := hex.EncodeToString(s.GetTraceId()); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
				t.Errorf("trace id %s: not joined to the caller's trace", got)
			}
			if s.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("status %v, want error for 429", s.GetStatus())
			}
			attrs := map[string]string{}
			for _, kv := range s.GetAttributes() {
				v := kv.GetValue()
				switch {
				case v.GetStringValue() != "":
					attrs[kv.GetKey()] = v.GetStringValue()
				case v.GetArrayValue() != nil:
					attrs[kv.GetKey()] = v.GetArrayValue().GetValues()[0].GetStringValue()
				default:
					attrs[kv.GetKey()] = strconv.FormatInt(v.GetIntValue(), 10)
				}
			}
			want := map[string]string{
				AttrGenAISystem: "openai", AttrGenAIProviderName: "openai", AttrGenAIOperationName: "chat",
				AttrGenAIRequestModel: "m1", AttrGenAIRequestMaxTokens: "256", AttrGenAIResponseModel: "gpt-4o-mini-2024-07-18",
				AttrGenAIResponseID: "chatcmpl-1", AttrGenAIResponseFinishReasons: "stop",
				AttrGenAIUsageInputTokens: "12", AttrGenAIUsageOutputTokens: "34", AttrHTTPResponseStatusCode: "429",
				AttrTenant: "alpha", AttrBackend: "b1", AttrKeyID: "b1-k1", AttrAttempts: "3", AttrRequestID: "req-9",
			}
			for k, v := range want {
				if attrs[k] != v {
					t.Errorf("%s = %q, want %q", k, attrs[k], v)
				}
			}
		})
	}
}

func TestSpanName(t *testing.T) {
	for _, c := range []struct{ op, model, want string }{{"chat", "m1", "chat m1"}, {"embeddings", "", "embeddings"}} {
		if got := SpanName(c.op, c.model); got != c.want {
			t.Errorf("SpanName(%q,%q) = %q", c.op, c.model, got)
		}
	}
}

// TestSampleRatio: telemetry.sample_ratio 0 keeps no trace that starts
// here (it once kept every one), the default keeps all, a sampled parent
// (Envoy's traceparent) still decides, and SetRatio changes the ratio on a
// running provider (a reload).
func TestSampleRatio(t *testing.T) {
	_, addr := startReceiver(t)
	sampledParent := ExtractTraceContext(context.Background(), map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	})
	for _, tc := range []struct {
		name   string
		ratio  *float64 // nil: the default
		parent bool
		want   bool
	}{
		{name: "default", want: true},
		{name: "1", ratio: new(1.0), want: true},
		{name: "0", ratio: new(0.0), want: false},
		{name: "0 under a sampled parent", ratio: new(0.0), parent: true, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Defaults().Telemetry
			cfg.OTLPEndpoint = addr
			if tc.ratio != nil {
				cfg.SampleRatio = *tc.ratio
			}
			tp, shutdown, err := NewTracerProvider(context.Background(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer shutdown(context.Background())
			ctx := context.Background()
			if tc.parent {
				ctx = sampledParent
			}
			_, span := tp.Tracer(TracerName).Start(ctx, "op")
			defer span.End()
			if got := span.SpanContext().IsSampled(); got != tc.want {
				t.Errorf("sample_ratio %v: sampled %v, want %v", cfg.SampleRatio, got, tc.want)
			}
		})
	}

	t.Run("reload", func(t *testing.T) {
		cfg := config.Defaults().Telemetry
		cfg.OTLPEndpoint, cfg.SampleRatio = addr, 0
		s := NewSampler(cfg.SampleRatio)
		tp, shutdown, err := NewTracerProvider(context.Background(), cfg, s)
		if err != nil {
			t.Fatal(err)
		}
		defer shutdown(context.Background())
		sampled := func() bool {
			_, span := tp.Tracer(TracerName).Start(context.Background(), "op")
			defer span.End()
			return span.SpanContext().IsSampled()
		}
		if sampled() {
			t.Fatal("sampled at ratio 0")
		}
		s.SetRatio(1)
		if !sampled() {
			t.Fatal("not sampled after the ratio was raised to 1")
		}
		s.SetRatio(0)
		if sampled() {
			t.Fatal("sampled after the ratio went back to 0")
		}
	})
}
