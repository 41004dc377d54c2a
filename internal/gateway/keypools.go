package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"google.golang.org/grpc"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/keypool"
	"github.com/swarmgate/swarmgate/internal/trust"
	"github.com/swarmgate/swarmgate/ratelimit/keylimit"
)

// keyPools runs the upstream key pools. ext_proc picks keys from them; a
// control plane without ext_proc still runs them (never picking) to mirror
// every replica's breaker trips from Redis and drive EDS health.
type keyPools struct{ pools *keypool.Pools }

func (k *keyPools) Run(ctx context.Context) error { return k.pools.Run(ctx) }

func (g *Gateway) startKeyPools(s *group, p *process) (*keypool.Pools, error) {
	popts := keypool.Options{Redis: p.rdb, Logger: g.log.With("component", "keypool"), Registerer: p.reg, ReplicaID: replicaID(g.opts.NodeID)}
	if g.opts.Roles.ExtProc && p.cfg.Envoy.RateLimitAddress != "" {
		kl, err := g.keyLimiter(s, p)
		if err != nil {
			return nil, err
		}
		popts.Limiter = kl
	}
	pools, err := keypool.New(p.cfg, popts)
	if err != nil {
		return nil, fmt.Errorf("key pools: %w", err)
	}
	g.onConfig(func(c *config.Config) error { pools.SetConfig(c); return nil })
	s.start(&keyPools{pools})
	return pools, nil
}

// keyLimiter checks each key's rpm/tpm in the rate-limit service, shared by
// every replica. Its connection stays open until every role has stopped:
// ext_proc picks keys while it drains.
func (g *Gateway) keyLimiter(s *group, p *process) (*keylimit.Limiter, error) {
	creds, err := trust.DialCredentials(&p.cfg.Security, config.ListenerRateLimit, g.log)
	if err != nil {
		return nil, err
	}
	conn, err := keylimit.Dial(p.cfg, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("rate-limit client: %w", err)
	}
	s.closeAfter(conn.Close)
	kl := keylimit.New(conn, p.cfg, keylimit.Options{Logger: g.log.With("component", "keylimit"), Registerer: p.reg})
	g.onConfig(func(c *config.Config) error { kl.Update(c); return nil })
	return kl, nil
}

// replicaID names this process in the key pools' shared state: its node id
// (readable in Redis) and a random suffix. Two processes given one node id
// (a fleet-wide --node-id, a restart while the old process drains) must not
// share an identity there: each ignores the breaker transitions its own id
// wrote, and the replicas that pick keys are counted by id.
func replicaID(nodeID string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return nodeID + "-" + hex.EncodeToString(b[:])
}
