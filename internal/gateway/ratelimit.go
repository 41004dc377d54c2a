package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/swarmgate/swarmgate/internal/admin"
	"github.com/swarmgate/swarmgate/internal/config"
	rlservice "github.com/swarmgate/swarmgate/ratelimit/service"
)

// startRateLimit starts the embedded envoyproxy/ratelimit service
// (*rlservice.Service is its own runner). Its Ready channel closes once the
// service's listener accepts connections: the process is ready then.
func (g *Gateway) startRateLimit(s *group, p *process) (*rlservice.Service, error) {
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
	return svc, nil
}

// rateLimitConfigLoaded keeps a rate-limit replica out of rotation until its
// first RateLimitConfig arrived over xDS: before it, the service answers
// every call Unavailable, which Envoy turns into its failure mode (every
// request refused, or let through unlimited).
func rateLimitConfigLoaded(svc *rlservice.Service) admin.ReadyCheck {
	return admin.ReadyCheck{
		Name: "ratelimit_config", Required: true,
		Why: "the rate-limit service answers Unavailable until its first RateLimitConfig arrives over xDS",
		Check: func(context.Context) error {
			select {
			case <-svc.ConfigLoaded():
				return nil
			default:
				return errors.New("no rate-limit config from the control plane yet")
			}
		},
	}
}
