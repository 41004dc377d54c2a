package gateway

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/keypool"
	"github.com/swarmgate/swarmgate/internal/trust"
	xdsserver "github.com/swarmgate/swarmgate/xds/server"
)

// controlPlane serves xDS (LDS/RDS/CDS/EDS, the rate-limit config and the
// replicas' GatewayConfig) on listen.xds.
type controlPlane struct {
	cp  *xdsserver.ControlPlane
	lis net.Listener
}

func (c *controlPlane) Run(ctx context.Context) error { return c.cp.Run(ctx, c.lis) }

// startControlPlane starts the control plane; pools, when this process
// runs them, give EDS its endpoint health.
func (g *Gateway) startControlPlane(s *group, p *process, pools *keypool.Pools) error {
	cfg := p.cfg
	// Envoy receives the fleet secret from the control plane (the ext_proc
	// filters' initial metadata): it must resolve here even though provider
	// keys are skipped.
	if !cfg.Security.FleetSecret.IsZero() && cfg.Security.FleetSecret.Value() == "" {
		return fmt.Errorf("security.fleet_secret %s does not resolve on the control plane, which hands it to Envoy", cfg.Security.FleetSecret.Ref())
	}
	tl, err := g.listenerTrust(cfg, config.ListenerXDS, "xds")
	if err != nil {
		return err
	}
	copts := xdsserver.Options{Logger: g.log.With("component", "xds"), Registerer: p.reg,
		ServerOptions: []grpc.ServerOption{grpc.Creds(tl.Credentials)}, NodeGroups: cfg.Security.XDS.NodeGroups}
	if pools != nil {
		copts.Health = pools
	}
	cp := xdsserver.New(copts)
	if err := cp.SetConfig(cfg); err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	// The control plane validates first: a config it refuses is not given
	// to anyone else.
	g.onConfigFirst(func(c *config.Config) error { return reloadControlPlane(cp, tl, c) })
	lis, err := bind(g.opts.Listeners.XDS, cfg.Listen.XDS, "listen.xds")
	if err != nil {
		return err
	}
	s.start(&controlPlane{cp, lis})
	return nil
}

// reloadControlPlane applies a reloaded config to the control plane. The
// node group grants change before the push, so an identity the reload
// revokes gets none of the new config; a config the control plane refuses
// leaves the previous grants in force. An identity left without any node
// group loses its connections: a client that kept its connection across a
// certificate renewal (Envoy) comes back with its new certificate instead
// of having every stream refused on the old one.
func reloadControlPlane(cp *xdsserver.ControlPlane, tl *trust.Listener, c *config.Config) error {
	prev := cp.SetNodeGroups(c.Security.XDS.NodeGroups)
	if err := cp.SetConfig(c); err != nil {
		cp.SetNodeGroups(prev)
		return err
	}
	tl.CloseUnless(cp.Granted, "its client identity has no xDS node group any more")
	return nil
}
