package gateway

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/admin"
	"github.com/swarmgate/swarmgate/internal/admission"
	"github.com/swarmgate/swarmgate/internal/affinity"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/keypool"
	"github.com/swarmgate/swarmgate/internal/subkey"
	"github.com/swarmgate/swarmgate/internal/telemetry"
	"github.com/swarmgate/swarmgate/internal/trust"
)

// extProcRole is the ext_proc gRPC service on listen.extproc, with what
// the admin API reads from it.
type extProcRole struct {
	server   *grpc.Server
	lis      net.Listener
	acct     *accounting
	refusals *admin.RefusalLog
	queue    *admission.Queue
	// subkeys is the sub-key store ext_proc authenticates from (nil unless
	// subkeys.enabled); the key API on the admin listener writes through
	// it. Its Synced channel gates this replica's readiness.
	subkeys *subkey.Store
}

// Run serves until ctx ends, then drains the streams in flight.
func (e *extProcRole) Run(ctx context.Context) error { return serveGRPC(ctx, e.server, e.lis) }

// startExtProc starts ext_proc and the parts it runs with: accounting and
// the Responses API affinity store, each as soon as it is built.
func (g *Gateway) startExtProc(s *group, p *process, pools *keypool.Pools) (*extProcRole, error) {
	cfg := p.cfg
	e := &extProcRole{refusals: admin.NewRefusalLog(256)}
	metrics := telemetry.NewMetrics(p.reg, cfg)
	g.onConfig(func(c *config.Config) error { metrics.SetConfig(c); return nil })
	// Access log lines are JSON objects on the process log's output.
	accessLog := telemetry.NewAccessLog(g.log.With("log", "access"), cfg.Telemetry)
	g.onConfig(func(c *config.Config) error { accessLog.SetConfig(c.Telemetry); return nil })
	// The sub-key store first: the reservations walk its keys' budgets.
	e.subkeys = g.startSubkeys(s, p)
	e.acct = g.startAccounting(s, p, e.subkeys)
	proof := g.extProcProof(cfg)
	e.queue = g.admissionQueue(p)
	// Who created each Responses API response, shared by every replica
	// (previous_response_id affinity, docs/families.md).
	aff := affinity.New(p.rdb, affinity.Options{Prefix: cfg.Redis.KeyPrefix, ReadTimeout: cfg.Redis.ReadTimeout.D(),
		Logger: g.log.With("component", "affinity"), Registerer: p.reg})
	s.start(aff)
	ep, err := extproc.New(extproc.Options{Tracer: p.tracer(), Authenticator: subkey.Auth{Store: e.subkeys}, Queue: wire.Queue(e.queue), Affinity: wire.Affinity(aff),
		Config: cfg, Logger: g.log.With("component", "extproc"), Registerer: p.reg,
		Keys: wire.Keys(pools), Usage: wire.Usage(), Ledger: wire.Ledger(e.acct.ledger, g.Config),
		Reserver: wire.Reserver(e.acct.reserve, g.Config), Budgets: wire.Budgets(e.acct.budgets),
		Refusals: wire.Refusals(e.refusals), Metrics: metrics, AccessLog: accessLog,
		Proof: proof,
	})
	if err != nil {
		return nil, fmt.Errorf("ext_proc: %w", err)
	}
	g.onConfig(func(c *config.Config) error { ep.SetConfig(c); return nil })
	tl, err := g.listenerTrust(cfg, config.ListenerExtProc, "extproc")
	if err != nil {
		return nil, err
	}
	e.server = grpc.NewServer(append(extproc.GRPCServerOptions(), grpc.Creds(tl.Credentials),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))...)
	ep.Register(e.server)
	if e.lis, err = bind(g.opts.Listeners.ExtProc, cfg.Listen.ExtProc, "listen.extproc"); err != nil {
		return nil, err
	}
	s.start(e)
	return e, nil
}

// ready is closed once ext_proc can serve every key it should: at once,
// or after the first full load of the sub-keys when they are on (a
// replica that answered before would refuse valid sub-keys as unknown).
func (e *extProcRole) ready() <-chan struct{} {
	if e.subkeys != nil {
		return e.subkeys.Synced()
	}
	done := make(chan struct{})
	close(done)
	return done
}

// extProcProof is the stream proof ext_proc checks. It follows reloads of
// this process's own file (a rotated fleet secret); a replica's configs
// from xDS carry no security section, so they leave it alone.
func (g *Gateway) extProcProof(cfg *config.Config) *trust.SwappableProof {
	log := g.log.With("component", "extproc")
	proof := trust.NewSwappableProof(trust.ExtProcProof(&cfg.Security, log))
	if !g.opts.FromXDS {
		g.onConfig(func(c *config.Config) error {
			proof.Set(trust.ExtProcProof(&c.Security, g.log.With("component", "extproc")))
			return nil
		})
	}
	return proof
}

// listenerTrust is the named gRPC listener's transport security. Its
// allowed identities follow reloads of this process's own file; a
// replica's configs from xDS carry no security section, so they leave
// them alone (as extProcProof).
func (g *Gateway) listenerTrust(cfg *config.Config, name, component string) (*trust.Listener, error) {
	tl, err := trust.NewListener(&cfg.Security, name, g.log.With("component", component))
	if err != nil {
		return nil, err
	}
	if !g.opts.FromXDS {
		g.onConfig(func(c *config.Config) error { tl.SetConfig(&c.Security); return nil })
	}
	return tl, nil
}
