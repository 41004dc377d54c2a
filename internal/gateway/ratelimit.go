package gateway

import (
	"fmt"

	rlservice "github.com/swarmgate/swarmgate/ratelimit/service"
)

// startRateLimit starts the embedded envoyproxy/ratelimit service
// (*rlservice.Service is its own runner). It returns the channel closed once
// the service's listener accepts connections: the process is ready then.
func (g *Gateway) startRateLimit(s *group, p *process) (<-chan struct{}, error) {
	svc, err := rlservice.New(p.cfg, rlservice.Options{Logger: g.log.With("component", "ratelimit"), Registerer: p.reg, Redis: p.rdb})
	if err != nil {
		return nil, fmt.Errorf("rate-limit service: %w", err)
	}
	s.start(svc)
	return svc.Ready(), nil
}
