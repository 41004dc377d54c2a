package service

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	rlconfig "github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/provider"
	"github.com/envoyproxy/ratelimit/src/stats"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

// xdsProvider is envoyproxy/ratelimit's provider.RateLimitConfigProvider fed
// by a SotW xDS stream, like its own CONFIG_TYPE=GRPC_XDS_SOTW provider
// (src/provider/xds_grpc_sotw_provider.go) and built from the same pieces:
// go-control-plane's sotw.ADSClient, config.ConfigXdsProtoToYaml and the
// library's config loader. It differs where the library's provider cannot
// live inside a larger process: it stops when its context ends (the
// library's Stop blocks forever while its dial is pending), it reconnects
// within a second instead of after a 10 s backoff, it reads no environment,
// and a rejected config is NACKed and never forwarded, so the last good
// config keeps serving.
type xdsProvider struct {
	// gate is held for writing while the library swaps its config: its
	// SetConfig writes fields (responseDynamicMetadataEnabled, ...) that
	// ShouldRateLimit reads without its lock, a data race the handler
	// avoids by calling under gate.RLock.
	gate    *sync.RWMutex
	cc      grpc.ClientConnInterface
	node    *corev3.Node
	stats   stats.Manager
	events  chan provider.ConfigUpdateEvent
	log     *slog.Logger
	m       *metrics
	backoff time.Duration
	cancel  context.CancelFunc
	done    chan struct{}
}

// configEvent is a provider.ConfigUpdateEvent carrying a loaded config
// (the library's ConfigUpdateEventImpl has unexported fields).
type configEvent struct{ cfg rlconfig.RateLimitConfig }

func (e configEvent) GetConfig() (rlconfig.RateLimitConfig, any) { return e.cfg, nil }

// barrierEvent follows every config event. The library's update loop only
// receives it once SetConfig of the previous event has returned, and its
// SetConfig returns at once for an event carrying a RateLimitConfigError,
// touching nothing: receiving it marks the end of the swap.
type barrierEvent struct{}

// barrierMsg is the barrier's error text; RouteLibraryLogs drops the line
// the library logs for it.
const barrierMsg = "swarmgate: config swap barrier (not an error)"

func (barrierEvent) GetConfig() (rlconfig.RateLimitConfig, any) {
	return nil, rlconfig.RateLimitConfigError(barrierMsg)
}

func newXDSProvider(gate *sync.RWMutex, cc grpc.ClientConnInterface, node *corev3.Node, st stats.Manager, log *slog.Logger, m *metrics) *xdsProvider {
	return &xdsProvider{
		gate: gate, cc: cc, node: node, stats: st, log: log, m: m,
		events:  make(chan provider.ConfigUpdateEvent),
		backoff: 200 * time.Millisecond,
		done:    make(chan struct{}),
	}
}

// ConfigUpdateEvent implements provider.RateLimitConfigProvider.
func (p *xdsProvider) ConfigUpdateEvent() <-chan provider.ConfigUpdateEvent { return p.events }

// Stop implements provider.RateLimitConfigProvider; it returns once the
// watch goroutine has ended.
func (p *xdsProvider) Stop() {
	if p.cancel != nil {
		p.cancel()
		<-p.done
	}
}

func (p *xdsProvider) start(ctx context.Context) {
	ctx, p.cancel = context.WithCancel(ctx)
	go p.run(ctx)
}

func (p *xdsProvider) run(ctx context.Context) {
	defer close(p.done)
	const maxBackoff = 5 * time.Second
	wait := p.backoff
	for ctx.Err() == nil {
		got, err := p.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if got {
			wait = p.backoff
		}
		p.log.Warn("ratelimit xDS stream ended; reconnecting", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, maxBackoff)
	}
}

// session runs one ADS stream until it fails. got reports whether at least
// one response arrived (then the backoff resets).
func (p *xdsProvider) session(ctx context.Context) (got bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ads := sotw.NewADSClient(sctx, p.node, resource.RateLimitConfigType)
	// WaitForReady: the stream waits for the control plane instead of
	// failing while it is still starting.
	if err := ads.InitConnect(p.cc, grpc.WaitForReady(true)); err != nil {
		return false, fmt.Errorf("ratelimit xDS connect: %w", err)
	}
	for {
		resp, err := ads.Fetch()
		if err != nil {
			return got, fmt.Errorf("ratelimit xDS fetch: %w", err)
		}
		got = true
		cfg, err := p.load(resp.Resources)
		if err != nil {
			p.m.configUpdates.WithLabelValues("rejected").Inc()
			p.log.Error("ratelimit config rejected; keeping the last good one", "err", err)
			if nerr := ads.Nack(err.Error()); nerr != nil {
				return got, fmt.Errorf("ratelimit xDS nack: %w", nerr)
			}
			continue
		}
		if err := p.swap(ctx, cfg); err != nil {
			return got, err
		}
		p.m.configUpdates.WithLabelValues("ok").Inc()
		p.m.configLoaded.Set(1)
		if err := ads.Ack(); err != nil {
			return got, fmt.Errorf("ratelimit xDS ack: %w", err)
		}
	}
}

// swap hands cfg to the library with no ShouldRateLimit running.
func (p *xdsProvider) swap(ctx context.Context, cfg rlconfig.RateLimitConfig) error {
	p.gate.Lock()
	defer p.gate.Unlock()
	for _, ev := range []provider.ConfigUpdateEvent{configEvent{cfg}, barrierEvent{}} {
		select {
		case p.events <- ev:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// load turns RateLimitConfig resources into the library's config. The
// loader panics with config.RateLimitConfigError on invalid input.
func (p *xdsProvider) load(res []*anypb.Any) (cfg rlconfig.RateLimitConfig, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("invalid ratelimit config: %v", r)
		}
	}()
	toLoad := make([]rlconfig.RateLimitConfigToLoad, 0, len(res))
	for _, a := range res {
		pb := &rlsconf.RateLimitConfig{}
		if err := a.UnmarshalTo(pb); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", a.GetTypeUrl(), err)
		}
		toLoad = append(toLoad, rlconfig.RateLimitConfigToLoad{Name: pb.Name, ConfigYaml: rlconfig.ConfigXdsProtoToYaml(pb)})
	}
	return rlconfig.NewRateLimitConfigImpl(toLoad, p.stats, false), nil
}
