// Package gateway assembles swarmgate's components into one process: the
// xDS control plane, the ext_proc service, the embedded rate-limit service
// and the admin server. `swarmgate serve` runs them all; `swarmgate xds`,
// `extproc` and `ratelimit` run one role each for fleets.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/keypool"
	rlservice "github.com/swarmgate/swarmgate/ratelimit/service"
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

// Run serves until ctx is cancelled, then shuts every role down: each
// runner drains on its own, then the connections the runners dialled close,
// then Redis, then the traces are flushed.
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
	p, err := openProcess(ctx, cfg, g.opts.Version)
	if err != nil {
		return err
	}
	defer p.close(ctx)
	s := newGroup(ctx)
	defer s.close()
	ready, err := g.startRoles(s, p)
	if err != nil {
		return s.abort(err)
	}
	if g.opts.Ready != nil {
		s.whenReady(g.opts.Ready, ready)
	}
	g.log.Info("swarmgate running", "xds", cfg.Listen.XDS, "extproc", cfg.Listen.ExtProc, "ratelimit", cfg.Listen.RateLimit,
		"admin", cfg.Listen.Admin, "roles", fmt.Sprintf("%+v", g.opts.Roles))
	return s.wait()
}

// startRoles starts the roles of this process in the order they depend on
// each other: key pools (ext_proc's keys, the control plane's EDS health),
// the control plane (the rate-limit service and replicas dial it),
// ext_proc, the rate-limit service, admin (it reads the others), and last
// the config source, which hands reloads to all of them (guarded against
// what a running process cannot change, reload.go). It returns what
// readiness waits for.
func (g *Gateway) startRoles(s *group, p *process) ([]<-chan struct{}, error) {
	roles := g.opts.Roles
	var (
		pools *keypool.Pools
		ep    *extProcRole
		ready []<-chan struct{}
		err   error
	)
	if roles.ExtProc || roles.ControlPlane {
		if pools, err = g.startKeyPools(s, p); err != nil {
			return nil, err
		}
	}
	if roles.ControlPlane {
		if err := g.startControlPlane(s, p, pools); err != nil {
			return nil, err
		}
	}
	if roles.ExtProc {
		if ep, err = g.startExtProc(s, p, pools); err != nil {
			return nil, err
		}
		ready = append(ready, ep.ready())
	}
	var rls *rlservice.Service
	if roles.RateLimit {
		if rls, err = g.startRateLimit(s, p); err != nil {
			return nil, err
		}
		ready = append(ready, rls.Ready())
	}
	if roles.Admin {
		if err := g.startAdmin(s, p, pools, ep, rls); err != nil {
			return nil, err
		}
	}
	g.guardReloads(p)
	return ready, g.startConfigSource(s, p)
}

// onConfig adds an applier: fn gets every new valid config, after the
// appliers added before it.
func (g *Gateway) onConfig(fn func(*config.Config) error) { g.appliers = append(g.appliers, fn) }

// onConfigFirst adds an applier that runs before all others and may refuse
// the config for everyone.
func (g *Gateway) onConfigFirst(fn func(*config.Config) error) {
	g.appliers = append([]func(*config.Config) error{fn}, g.appliers...)
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
