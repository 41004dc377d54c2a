package gateway

import (
	"fmt"

	"github.com/swarmgate/swarmgate/internal/config"
	rlservice "github.com/swarmgate/swarmgate/ratelimit/service"
)

// startRateLimit starts the embedded envoyproxy/ratelimit service
// (*rlservice.Service is its own runner). It returns the channel closed once
// the service's listener accepts connections: the process is ready then.
func (g *Gateway) startRateLimit(s *group, p *process) (<-chan struct{}, error) {
	tl, err := g.listenerTrust(p.cfg, config.ListenerRateLimit, "ratelimit")
	if err != nil {
		return nil, fmt.Errorf("rate-limit service: %w", err)
	}
	svc, err := rlservice.New(p.cfg, rlservice.Options{Logger: g.log.With("component", "ratelimit"), Registerer: p.reg, Redis: p.rdb,
		Creds: tl.Credentials})
	if err != nil {
		return nil, fmt.Errorf("rate-limit service: %w", err)
	}
	s.start(svc)
	return svc.Ready(), nil
}
