package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redisconn"
	"github.com/swarmgate/swarmgate/internal/telemetry"
)

// process is what every role shares, opened before the first role is
// built and closed after the last has stopped: the first config, the
// metrics registry, the tracer provider and the Redis clients.
type process struct {
	cfg             *config.Config
	reg             *prometheus.Registry
	tp              trace.TracerProvider
	shutdownTracing func(context.Context) error
	rdb             redis.UniversalClient
	// orderRDB is the admission order's own client (AdmissionClient).
	orderRDB redis.UniversalClient
	// sampler follows telemetry.sample_ratio across reloads.
	sampler *telemetry.Sampler
}

func openProcess(ctx context.Context, cfg *config.Config, version string) (*process, error) {
	p := &process{cfg: cfg, reg: telemetry.NewRegistry(version), sampler: telemetry.NewSampler(cfg.Telemetry.SampleRatio)}
	var err error
	p.tp, p.shutdownTracing, err = telemetry.NewTracerProvider(ctx, cfg.Telemetry, p.sampler)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	if p.rdb, err = redisconn.New(cfg.Redis); err != nil {
		p.flushTraces(ctx)
		return nil, fmt.Errorf("redis: %w", err)
	}
	if p.orderRDB, err = AdmissionClient(cfg); err != nil {
		p.rdb.Close()
		p.flushTraces(ctx)
		return nil, fmt.Errorf("redis: %w", err)
	}
	m := telemetry.NewRedisMetrics(p.reg)
	p.rdb.AddHook(m)
	p.orderRDB.AddHook(m)
	return p, nil
}

// tracer is nil unless an OTLP endpoint is set: no per-request cost when off.
func (p *process) tracer() trace.Tracer {
	if p.cfg.Telemetry.OTLPEndpoint == "" {
		return nil
	}
	return p.tp.Tracer(telemetry.TracerName)
}

// close closes Redis, then flushes the traces.
func (p *process) close(ctx context.Context) {
	p.rdb.Close()
	p.orderRDB.Close()
	p.flushTraces(ctx)
}

func (p *process) flushTraces(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = p.shutdownTracing(sctx)
}
