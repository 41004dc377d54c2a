package gateway

import (
	"context"
	"fmt"
	"log/slog"

	"google.golang.org/grpc"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/trust"
	"github.com/swarmgate/swarmgate/xds/replica"
	"github.com/swarmgate/swarmgate/xds/watch"
)

// fileSource watches the config file and applies each valid change (a
// reload that removes backends in two steps, retire.go).
type fileSource struct {
	path  string
	apply func(*config.Config) error
	opts  watch.Options
}

func (f *fileSource) Run(ctx context.Context) error { return watch.Run(ctx, f.path, f.apply, f.opts) }

// xdsSource takes the config from the control plane's GatewayConfig
// resource (an `extproc --from-xds` replica) and applies each one.
type xdsSource struct {
	conn  *grpc.ClientConn
	opts  replica.Options
	apply func(*config.Config) error
	log   *slog.Logger
}

func (x *xdsSource) Run(ctx context.Context) error {
	return replica.Run(ctx, x.conn, x.opts, func(c *config.Config) {
		if err := x.apply(c); err != nil {
			x.log.Error("config from control plane refused", "err", err)
		}
	})
}

// startConfigSource starts what feeds this process new configs, once every
// role that applies them runs: a watched file (a control plane or a
// standalone ext_proc) or the control plane (ext_proc replicas). A process
// given its config in memory has none.
func (g *Gateway) startConfigSource(s *group, p *process) error {
	switch {
	case g.opts.FromXDS:
		log := g.log.With("component", "replica")
		creds, err := trust.DialCredentials(&p.cfg.Security, config.ListenerXDS, log)
		if err != nil {
			return err
		}
		conn, err := grpc.NewClient(p.cfg.Envoy.XDSAddress, grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(contract.MaxXDSMessageBytes)))
		if err != nil {
			return fmt.Errorf("xds client: %w", err)
		}
		s.closeAfter(conn.Close)
		s.start(&xdsSource{conn: conn, apply: g.apply, log: g.log,
			opts: replica.Options{NodeID: g.opts.NodeID, Load: g.opts.Load, Logger: log}})
	case g.opts.ConfigPath != "":
		s.start(&fileSource{path: g.opts.ConfigPath, apply: g.applyFromFile,
			// The process serves the config it loaded at start: a save
			// caught mid-write as the watcher starts must not stop it.
			opts: watch.Options{Load: g.opts.Load, Logger: g.log.With("component", "watch"), Registerer: p.reg, Serving: true}})
	}
	return nil
}
