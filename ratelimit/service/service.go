// Package service runs the real envoyproxy/ratelimit service inside the
// swarmgate process: its config loader, its service (ShouldRateLimit) and
// its Redis fixed-window limiter, wired by hand so that nothing in it owns
// the process. The library's runner (src/service_cmd/runner) is not used: it
// installs SIGINT/SIGTERM/SIGHUP handlers that call os.Exit(0), opens three
// listeners with SO_REUSEPORT and exits through logrus.Fatal when one fails.
//
// What we supply instead, each behind the library's own interface:
//   - the xDS config provider (provider.RateLimitConfigProvider), SotW like
//     CONFIG_TYPE=GRPC_XDS_SOTW, node id contract.NodeRateLimit;
//   - the Redis driver (redis.Client) on go-redis, built from config.Redis
//     (standalone, Sentinel, Cluster) with bounded timeouts;
//   - the gRPC listener on config.Listen.RateLimit, with the standard gRPC
//     health service and the TLS policy of security.ratelimit.
//
// Several Services may run one after another or side by side in one process
// (tests do); each leaks one idle goroutine when stopped (the library's
// config-update loop has no exit), nothing else.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/limiter"
	rlredis "github.com/envoyproxy/ratelimit/src/redis"
	ratelimit "github.com/envoyproxy/ratelimit/src/service"
	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/envoyproxy/ratelimit/src/stats"
	"github.com/envoyproxy/ratelimit/src/utils"
	gostats "github.com/lyft/gostats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/redisconn"
	"github.com/swarmgate/swarmgate/internal/trust"
)

// HealthService is the gRPC health service name the listener reports
// SERVING once a RateLimitConfig is loaded ("" reports the same).
const HealthService = "ratelimit"

// Options are the optional dependencies of a Service.
type Options struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: metrics are created, not registered
	// Redis, when set, holds the counters instead of a client built from
	// config.Redis. Run does not close it.
	Redis redis.UniversalClient
	// XDS, when set, is the control-plane connection instead of one dialled
	// to config.Envoy.XDSAddress. Run does not close it.
	XDS grpc.ClientConnInterface
	// ChargeRefused makes a refused request still count against every other
	// limit it names (the library's default). When false (ours), a request
	// refused by one descriptor does not consume the others' windows
	// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT): a swarm hammering a spent
	// RPM window would otherwise burn its daily quota with refused calls.
	// Envoy's stream-end token top-ups are charged in full either way
	// (chargeCache): nothing is refused by them.
	ChargeRefused bool
	// ShutdownGrace bounds how long in-flight calls may finish at stop.
	ShutdownGrace time.Duration
	// Creds are the listener's transport credentials; nil builds them from
	// config.Security (security.ratelimit: TLS, mutual TLS, allowed client
	// identities, files re-read on change). The library's own
	// GRPC_SERVER_TLS_* settings are not used: they read the files once and
	// check a single SAN.
	Creds credentials.TransportCredentials
}

// Service is one embedded rate-limit service. Create it with New and run it
// with Run.
type Service struct {
	cfg      *config.Config
	opts     Options
	log      *slog.Logger
	m        *metrics
	settings settings.Settings

	running      atomic.Bool
	ready        chan struct{}
	configLoaded chan struct{}
	mu           sync.Mutex
	addr         net.Addr
}

// New checks cfg and the environment and prepares a Service. It opens
// nothing; Run does.
func New(cfg *config.Config, opts Options) (*Service, error) {
	if cfg == nil {
		return nil, errors.New("ratelimit service: nil config")
	}
	if cfg.Listen.RateLimit == "" || cfg.Envoy.XDSAddress == "" || cfg.Envoy.RateLimitDomain == "" {
		return nil, errors.New("ratelimit service: listen.ratelimit, envoy.xds_address and envoy.ratelimit_domain are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = 2 * time.Second
	}
	set, err := checkEnvironment(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	if len(set) > 0 {
		opts.Logger.Warn("environment variables change envoyproxy/ratelimit answers (it re-reads them on every config update)", "vars", set)
	}
	s, err := buildSettings(cfg, !opts.ChargeRefused)
	if err != nil {
		return nil, err
	}
	return &Service{
		cfg: cfg, opts: opts, log: opts.Logger, m: newMetrics(opts.Registerer), settings: s,
		ready: make(chan struct{}), configLoaded: make(chan struct{}),
	}, nil
}

// Ready is closed once the gRPC listener accepts connections.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// ConfigLoaded is closed once the first RateLimitConfig arrived over xDS;
// before that every call is answered Unavailable.
func (s *Service) ConfigLoaded() <-chan struct{} { return s.configLoaded }

// Addr is the listening address: set once Run listens, before Ready or
// ConfigLoaded close; nil before that.
func (s *Service) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Run serves until ctx ends, then stops gracefully and returns nil. It
// returns an error when it cannot listen or the server fails. A Service
// runs once.
func (s *Service) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("ratelimit service: Run called twice")
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.cfg.Listen.RateLimit)
	if err != nil {
		return fmt.Errorf("ratelimit service: %w", config.ListenError("listen.ratelimit", s.cfg.Listen.RateLimit, err))
	}
	defer ln.Close()
	// Set before anything can close configLoaded: a caller woken by it
	// reads Addr (the first config may arrive before Serve starts).
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()

	rdb := s.opts.Redis
	if rdb == nil {
		if rdb, err = redisconn.New(s.cfg.Redis); err != nil {
			return fmt.Errorf("ratelimit service: %w", err)
		}
		defer rdb.Close()
	}
	cc := s.opts.XDS
	if cc == nil {
		xdsCreds, err := trust.DialCredentials(&s.cfg.Security, config.ListenerXDS, s.log)
		if err != nil {
			return fmt.Errorf("ratelimit service: %w", err)
		}
		conn, err := grpc.NewClient(s.cfg.Envoy.XDSAddress, grpc.WithTransportCredentials(xdsCreds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(contract.MaxXDSMessageBytes)))
		if err != nil {
			return fmt.Errorf("ratelimit service: xDS client for %s: %w", s.cfg.Envoy.XDSAddress, err)
		}
		defer conn.Close()
		cc = conn
	}

	statsManager := newSubkeyStats(stats.NewStatManager(gostats.NewStore(gostats.NewNullSink(), false), s.settings), s.cfg.Envoy.RateLimitDomain)
	// One pipeline (GET or INCRBY+EXPIRE for every descriptor) gets
	// redis.read_timeout in all, dial and retries included: Envoy gave up
	// after its own 20 ms long before, so longer only parks goroutines.
	opTimeout := max(s.cfg.Redis.ReadTimeout.D(), 50*time.Millisecond)
	client := &redisClient{rdb: rdb, opTimeout: opTimeout, onError: s.m.redisErrors.Inc}
	jitter := rand.New(utils.NewLockedSource(time.Now().UnixNano()))
	newCache := func(stopIncrementWhenOverLimit bool) limiter.RateLimitCache {
		return rlredis.NewFixedRateLimitCacheImpl(
			client,
			nil, // no separate per-second Redis
			utils.NewTimeSourceImpl(),
			jitter,
			s.settings.ExpirationJitterMaxSeconds,
			nil, // no local over-limit cache: every replica must see Redis
			s.settings.NearLimitRatio,
			s.settings.CacheKeyPrefix,
			statsManager,
			stopIncrementWhenOverLimit,
		)
	}
	cache := newCache(s.settings.StopCacheKeyIncrementWhenOverlimit)
	if s.settings.StopCacheKeyIncrementWhenOverlimit {
		// Stream-end top-ups are charged in full (chargeCache).
		cache = &chargeCache{refusable: cache, chargeAll: newCache(false),
			keys: limiter.NewCacheKeyGenerator(s.settings.CacheKeyPrefix),
			giveBack: func(key string, n int64) {
				if err := client.DoCmd(nil, "DECRBY", key, n); err != nil {
					s.log.Warn("ratelimit: refused tokens not given back to their window", "err", err)
				}
			},
			now: func() int64 { return time.Now().Unix() }}
	}

	h := &handler{m: s.m, log: s.log}
	node := &corev3.Node{Id: contract.NodeRateLimit, Cluster: contract.NodeRateLimit}
	prov := newXDSProvider(&h.gate, cc, node, statsManager, s.log, s.m)
	prov.start(ctx)
	defer prov.Stop()

	creds := s.opts.Creds
	if creds == nil {
		if creds, err = trust.ListenerCredentials(&s.cfg.Security, config.ListenerRateLimit, s.log); err != nil {
			return fmt.Errorf("ratelimit service: %w", err)
		}
	}
	srv := grpc.NewServer(grpc.Creds(creds))
	rlspb.RegisterRateLimitServiceServer(srv, h)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	hs.SetServingStatus(HealthService, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, hs)

	// NewService blocks until the provider delivers the first config, then
	// keeps a goroutine reading further updates.
	go func() {
		svc := ratelimit.NewService(cache, prov, statsManager, nil, utils.NewTimeSourceImpl(), false, false, false)
		var rs rlspb.RateLimitServiceServer = svc
		h.svc.Store(&rs)
		hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		hs.SetServingStatus(HealthService, healthpb.HealthCheckResponse_SERVING)
		close(s.configLoaded)
		s.log.Info("ratelimit service: config loaded", "domain", s.cfg.Envoy.RateLimitDomain)
	}()

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	close(s.ready)
	s.log.Info("ratelimit service listening", "addr", ln.Addr().String(), "xds", s.cfg.Envoy.XDSAddress)

	select {
	case err := <-serveErr:
		return fmt.Errorf("ratelimit service: serve: %w", err)
	case <-ctx.Done():
	}
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(s.opts.ShutdownGrace):
		srv.Stop()
		<-stopped
	}
	s.log.Info("ratelimit service stopped")
	return nil
}
