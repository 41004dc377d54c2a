// Package gateway assembles swarmgate's components into one process: the
// xDS control plane, the ext_proc service, the embedded rate-limit service
// and the admin server. `swarmgate serve` runs them all; `swarmgate xds`,
// `extproc` and `ratelimit` run one role each for fleets.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"github.com/swarmgate/swarmgate/internal/admission"
	"github.com/swarmgate/swarmgate/internal/affinity"
	"github.com/swarmgate/swarmgate/internal/identity"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/accounting/budget"
	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/reserve"
	"github.com/swarmgate/swarmgate/internal/admin"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/keypool"
	"github.com/swarmgate/swarmgate/internal/redisconn"
	"github.com/swarmgate/swarmgate/internal/telemetry"
	"github.com/swarmgate/swarmgate/internal/trust"
	"github.com/swarmgate/swarmgate/ratelimit/keylimit"
	rlservice "github.com/swarmgate/swarmgate/ratelimit/service"
	"github.com/swarmgate/swarmgate/xds/replica"
	xdsserver "github.com/swarmgate/swarmgate/xds/server"
	"github.com/swarmgate/swarmgate/xds/watch"
)

// Roles selects what one process runs.
type Roles struct {
	ControlPlane bool // xDS server + config file watch
	ExtProc      bool // ext_proc gRPC service (+ key pools, accounting)
	RateLimit    bool // embedded envoyproxy/ratelimit service
	Admin        bool // admin HTTP: metrics, health, status page
}

// All is `swarmgate serve`.
var All = Roles{ControlPlane: true, ExtProc: true, RateLimit: true, Admin: true}

// Options configure a Gateway.
type Options struct {
	Roles Roles
	// ConfigPath is watched and reloaded when set; otherwise Initial is
	// served as is (the embedded default, or tests).
	ConfigPath string
	Initial    *config.Config
	// FromXDS makes an ext_proc-only process take its config from the
	// control plane (swarmgate.v1.GatewayConfig) instead of a file.
	FromXDS bool
	// Load resolves secrets for configs loaded from files or xDS.
	Load    config.Options
	NodeID  string
	Logger  *slog.Logger
	Version string
	// Listeners, when set, are used instead of binding the config's
	// listen addresses (tests bind 127.0.0.1:0 first).
	Listeners Listeners
	// Ready is closed once every role is serving (tests wait on it).
	Ready chan<- struct{}
	// RetireAfter is how long backends a file reload removes stay known to
	// ext_proc after routing has left them (DefaultRetireAfter when 0).
	RetireAfter time.Duration
}

// Listeners are pre-bound sockets for the gRPC and HTTP servers.
type Listeners struct {
	XDS, ExtProc, Admin net.Listener
}

// Gateway is one running swarmgate process.
type Gateway struct {
	opts Options
	log  *slog.Logger
	cfg  atomic.Pointer[config.Config]
	// appliers are called, in order, with every new valid config.
	appliers []func(*config.Config) error
	retire   retirer
}

// New checks the options; Run starts everything.
func New(opts Options) (*Gateway, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Initial == nil && opts.ConfigPath == "" && !opts.FromXDS {
		return nil, errors.New("gateway: no config (path, initial config or xDS)")
	}
	if opts.FromXDS && (opts.Roles.ControlPlane || opts.Roles.RateLimit) {
		return nil, errors.New("gateway: only an ext_proc-only process takes its config over xDS")
	}
	return &Gateway{opts: opts, log: opts.Logger}, nil
}

// Config is the config in force.
func (g *Gateway) Config() *config.Config { return g.cfg.Load() }

// Run serves until ctx is cancelled, then shuts every role down.
func (g *Gateway) Run(ctx context.Context) error {
	cfg, err := g.firstConfig(ctx)
	if err != nil {
		return err
	}
	g.cfg.Store(cfg)
	// A pending second step of a reload never runs into a shutdown.
	stopRetire := context.AfterFunc(ctx, g.stopRetiring)
	defer stopRetire()
	defer g.stopRetiring()
	reg := telemetry.NewRegistry(g.opts.Version)
	roles := g.opts.Roles
	tp, shutdownTracing, err := telemetry.NewTracerProvider(ctx, cfg.Telemetry)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx)
	}()

	rdb, err := redisconn.New(cfg.Redis)
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	defer rdb.Close()
	rdb.AddHook(telemetry.NewRedisMetrics(reg))

	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	grp, ctx := errgroup.WithContext(runCtx)
	// A setup step that fails after others started stops and waits for
	// them, so nothing keeps running on a closed Redis client.
	fail := func(err error) error {
		cancelRun()
		_ = grp.Wait()
		return err
	}
	var ready []<-chan struct{}

	// Control plane first: the rate-limit service and replicas dial it.
	var cp *xdsserver.ControlPlane
	var pools *keypool.Pools
	// Key pools: ext_proc picks keys from them; a control plane without
	// ext_proc still runs them (never picking) to mirror every replica's
	// breaker trips from Redis and drive EDS health.
	if roles.ExtProc || roles.ControlPlane {
		var limiterConn *grpc.ClientConn
		if roles.ExtProc && cfg.Envoy.RateLimitAddress != "" {
			rlsCreds, err := trust.DialCredentials(&cfg.Security, config.ListenerRateLimit, g.log)
			if err != nil {
				return fail(err)
			}
			if limiterConn, err = keylimit.Dial(cfg, grpc.WithTransportCredentials(rlsCreds)); err != nil {
				return fail(fmt.Errorf("rate-limit client: %w", err))
			}
			defer limiterConn.Close()
		}
		popts := keypool.Options{Redis: rdb, Logger: g.log.With("component", "keypool"), Registerer: reg, ReplicaID: g.opts.NodeID}
		if limiterConn != nil {
			kl := keylimit.New(limiterConn, cfg, keylimit.Options{Logger: g.log.With("component", "keylimit"), Registerer: reg})
			popts.Limiter = kl
			g.appliers = append(g.appliers, func(c *config.Config) error { kl.Update(c); return nil })
		}
		if pools, err = keypool.New(cfg, popts); err != nil {
			return fail(fmt.Errorf("key pools: %w", err))
		}
		g.appliers = append(g.appliers, func(c *config.Config) error { pools.SetConfig(c); return nil })
		grp.Go(func() error { return pools.Run(ctx) })
	}
	if roles.ControlPlane {
		// Envoy receives the fleet secret from the control plane (the
		// ext_proc filters' initial metadata): it must resolve here even
		// though provider keys are skipped.
		if !cfg.Security.FleetSecret.IsZero() && cfg.Security.FleetSecret.Value() == "" {
			return fail(fmt.Errorf("security.fleet_secret %s does not resolve on the control plane, which hands it to Envoy", cfg.Security.FleetSecret.Ref()))
		}
		xdsCreds, err := trust.ListenerCredentials(&cfg.Security, config.ListenerXDS, g.log.With("component", "xds"))
		if err != nil {
			return fail(err)
		}
		copts := xdsserver.Options{Logger: g.log.With("component", "xds"), Registerer: reg,
			ServerOptions: []grpc.ServerOption{grpc.Creds(xdsCreds)}, NodeGroups: cfg.Security.XDS.NodeGroups}
		if pools != nil {
			copts.Health = pools
		}
		cp = xdsserver.New(copts)
		if err := cp.SetConfig(cfg); err != nil {
			return fail(fmt.Errorf("control plane: %w", err))
		}
		// The control plane validates first: a config it refuses is not
		// given to anyone else.
		g.appliers = append([]func(*config.Config) error{cp.SetConfig}, g.appliers...)
		lis, err := g.listen(g.opts.Listeners.XDS, cfg.Listen.XDS, "listen.xds")
		if err != nil {
			return fail(err)
		}
		grp.Go(func() error { return cp.Run(ctx, lis) })
	}

	var refusals *admin.RefusalLog
	var led *ledger.Ledger
	var budgets *budget.Budgets
	var queue *admission.Queue
	if roles.ExtProc {
		refusals = admin.NewRefusalLog(256)
		metrics := telemetry.NewMetrics(reg, cfg)
		g.appliers = append(g.appliers, func(c *config.Config) error { metrics.SetConfig(c); return nil })
		// Access log lines are JSON objects on the process log's output.
		accessLog := telemetry.NewAccessLog(g.log.With("log", "access"), cfg.Telemetry)
		g.appliers = append(g.appliers, func(c *config.Config) error { accessLog.SetConfig(c.Telemetry); return nil })
		budgets = budget.New(rdb, cfg, budget.Options{Logger: g.log.With("component", "budget"), Registerer: reg})
		g.appliers = append(g.appliers, func(c *config.Config) error { budgets.SetConfig(c); return nil })
		grp.Go(func() error { budgets.Run(ctx); return nil })
		lopts := ledger.OptionsFrom(cfg)
		lopts.Logger, lopts.Registerer, lopts.AfterWrite = g.log.With("component", "ledger"), reg, budgets.AfterWrite
		led = ledger.New(rdb, lopts)
		grp.Go(func() error {
			led.Run(ctx)
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			return led.Close(cctx)
		})
		res := reserve.New(rdb, cfg, reserve.Options{Logger: g.log.With("component", "reserve"), Registerer: reg,
			LedgerDrained: func() bool { n, spilled := led.Pending(); return n == 0 && !spilled }})
		g.appliers = append(g.appliers, func(c *config.Config) error { res.SetConfig(c); return nil })
		grp.Go(func() error {
			res.Run(ctx)
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			// Settles left over only keep their holds until the TTL.
			if err := res.Close(cctx); err != nil {
				g.log.Warn("reserve: closing", "err", err)
			}
			return nil
		})

		var tracer trace.Tracer // nil unless an OTLP endpoint is set: no per-request cost when off
		if cfg.Telemetry.OTLPEndpoint != "" {
			tracer = tp.Tracer(telemetry.TracerName)
		}
		// The fleet proof follows reloads of this process's own file (a
		// rotated fleet secret); a replica's configs from xDS carry no
		// security section, so they leave it alone.
		proof := trust.NewSwappableProof(trust.ExtProcProof(&cfg.Security, g.log.With("component", "extproc")))
		if !g.opts.FromXDS {
			g.appliers = append(g.appliers, func(c *config.Config) error {
				proof.Set(trust.ExtProcProof(&c.Security, g.log.With("component", "extproc")))
				return nil
			})
		}
		// The admission queue (used while admission.max_wait > 0): one order
		// for every replica in Redis. Ticket ids must be unique across
		// replicas, so they carry a random per-process id. Queue length,
		// poll and Redis bound are read at start.
		queue = admission.New(admission.Options{ReplicaID: identity.NewRequestID(),
			Order:    admission.NewRedisOrder(rdb, cfg.Redis.KeyPrefix),
			MaxQueue: cfg.Admission.MaxQueue, Poll: cfg.Admission.Poll.D(), StepTimeout: cfg.Admission.RedisTimeout.D(),
			FailOpen: cfg.FailureModes.AdmissionOrder == config.FailOpen, Logger: g.log.With("component", "admission"),
			Metrics:  admission.NewMetrics(reg),
			Sessions: admission.NewRedisSessions(rdb, cfg.Redis.KeyPrefix), SessionIdle: cfg.Admission.SessionIdle.D(),
			SessionSpan: cfg.Admission.SessionSpan.D(), MaxSessions: cfg.Admission.MaxSessions})
		// Who created each Responses API response, shared by every
		// replica (previous_response_id affinity, docs/families.md).
		aff := affinity.New(rdb, affinity.Options{Prefix: cfg.Redis.KeyPrefix, ReadTimeout: cfg.Redis.ReadTimeout.D(),
			Logger: g.log.With("component", "affinity"), Registerer: reg})
		grp.Go(func() error { return aff.Run(ctx) })
		ep, err := extproc.New(extproc.Options{Tracer: tracer, Queue: wire.Queue(queue), Affinity: wire.Affinity(aff),
			Config: cfg, Logger: g.log.With("component", "extproc"), Registerer: reg,
			Keys: wire.Keys(pools), Usage: wire.Usage(), Ledger: wire.Ledger(led, g.Config),
			Reserver: wire.Reserver(res, g.Config), Budgets: wire.Budgets(budgets),
			Refusals: wire.Refusals(refusals), Metrics: metrics, AccessLog: accessLog,
			Proof: proof,
		})
		if err != nil {
			return fail(fmt.Errorf("ext_proc: %w", err))
		}
		g.appliers = append(g.appliers, func(c *config.Config) error { ep.SetConfig(c); return nil })
		epCreds, err := trust.ListenerCredentials(&cfg.Security, config.ListenerExtProc, g.log.With("component", "extproc"))
		if err != nil {
			return fail(err)
		}
		gs := grpc.NewServer(append(extproc.GRPCServerOptions(cfg), grpc.Creds(epCreds),
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))...)
		ep.Register(gs)
		lis, err := g.listen(g.opts.Listeners.ExtProc, cfg.Listen.ExtProc, "listen.extproc")
		if err != nil {
			return fail(err)
		}
		grp.Go(func() error { return serveGRPC(ctx, gs, lis) })
	}

	if roles.RateLimit {
		svc, err := rlservice.New(cfg, rlservice.Options{Logger: g.log.With("component", "ratelimit"), Registerer: reg, Redis: rdb})
		if err != nil {
			return fail(fmt.Errorf("rate-limit service: %w", err))
		}
		ready = append(ready, svc.Ready())
		grp.Go(func() error { return svc.Run(ctx) })
	}

	if roles.Admin {
		aopts := admin.Options{
			Logger: g.log.With("component", "admin"), Gatherer: reg, Config: g.Config, Access: cfg.Admin, Refusals: refusals,
			Ready: []admin.ReadyCheck{admin.RedisCheckLive(rdb, g.Config)}, Version: g.opts.Version,
		}
		if pools != nil {
			aopts.Keys = admin.KeySourceFunc(func(context.Context) ([]admin.KeyState, error) {
				snap := pools.Snapshot()
				out := make([]admin.KeyState, len(snap))
				for i, k := range snap {
					out[i] = admin.KeyState(k)
				}
				return out, nil
			})
		}
		if led != nil {
			aopts.Usage = led.Handler(g.Config) // the config in force: reloads add tenants
			aopts.Budgets = budgetSource(g.Config, led)
		}
		if queue != nil {
			aopts.Queue = queueSource(queue)
		}
		as := admin.New(aopts)
		lis, err := g.listen(g.opts.Listeners.Admin, cfg.Listen.Admin, "listen.admin")
		if err != nil {
			return fail(err)
		}
		grp.Go(func() error { return as.Run(ctx, lis) })
	}

	// Config updates: a watched file (control plane or standalone ext_proc)
	// or the control plane's GatewayConfig resource (ext_proc replicas).
	switch {
	case g.opts.FromXDS:
		xdsCreds, err := trust.DialCredentials(&cfg.Security, config.ListenerXDS, g.log.With("component", "replica"))
		if err != nil {
			return fail(err)
		}
		conn, err := grpc.NewClient(cfg.Envoy.XDSAddress, grpc.WithTransportCredentials(xdsCreds))
		if err != nil {
			return fail(fmt.Errorf("xds client: %w", err))
		}
		defer conn.Close()
		grp.Go(func() error {
			return replica.Run(ctx, conn, replica.Options{NodeID: g.opts.NodeID, Load: g.opts.Load, Logger: g.log.With("component", "replica")},
				func(c *config.Config) {
					if err := g.apply(c); err != nil {
						g.log.Error("config from control plane refused", "err", err)
					}
				})
		})
	case g.opts.ConfigPath != "":
		grp.Go(func() error {
			return watch.Run(ctx, g.opts.ConfigPath, g.applyFromFile, watch.Options{Load: g.opts.Load, Logger: g.log.With("component", "watch"), Registerer: reg})
		})
	}

	if g.opts.Ready != nil {
		grp.Go(func() error {
			for _, r := range ready {
				select {
				case <-r:
				case <-ctx.Done():
					return nil
				}
			}
			close(g.opts.Ready)
			return nil
		})
	}
	g.log.Info("swarmgate running", "xds", cfg.Listen.XDS, "extproc", cfg.Listen.ExtProc, "ratelimit", cfg.Listen.RateLimit,
		"admin", cfg.Listen.Admin, "roles", fmt.Sprintf("%+v", roles))
	err = grp.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// apply hands a new config to every component, control plane first; the
// first refusal stops the rollout and the previous config stays in force.
func (g *Gateway) apply(c *config.Config) error {
	for _, a := range g.appliers {
		if err := a(c); err != nil {
			return err
		}
	}
	g.cfg.Store(c)
	return nil
}

func (g *Gateway) firstConfig(ctx context.Context) (*config.Config, error) {
	switch {
	case g.opts.Initial != nil:
		return g.opts.Initial, nil
	case g.opts.ConfigPath != "":
		return config.Load(g.opts.ConfigPath, g.opts.Load)
	default:
		return nil, errors.New("gateway: an ext_proc replica needs a bootstrap config naming the control plane")
	}
}

// listen opens addr, the config's field, unless the caller passed a
// listener; a taken port names the field that moves it.
func (g *Gateway) listen(pre net.Listener, addr, field string) (net.Listener, error) {
	if pre != nil {
		return pre, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, config.ListenError(field, addr, err)
	}
	return lis, nil
}

func serveGRPC(ctx context.Context, gs *grpc.Server, lis net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		done := make(chan struct{})
		go func() { gs.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			gs.Stop()
		}
		return nil
	}
}
