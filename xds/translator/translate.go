// Package translator turns the validated config (through xds/ir) into Envoy
// xDS resources and the rate-limit service's RateLimitConfig. Every function
// is pure: the same config yields byte-identical resources, so replicas of
// the control plane agree on versions without coordination.
package translator

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/xds/ir"
)

// Resources is the Envoy configuration of one config, EDS excluded (see
// Endpoints), plus the rate-limit service's config.
type Resources struct {
	IR        *ir.Gateway
	Listeners []*listenerv3.Listener
	Routes    []*routev3.RouteConfiguration
	Clusters  []*clusterv3.Cluster // pools (sorted), then ext_proc, rate limit
	RateLimit *rlsconf.RateLimitConfig
}

// Translate builds every resource of cfg and validates them (ValidateAll on
// each resource and on every typed_config inside it).
func Translate(cfg *config.Config) (*Resources, error) {
	g := ir.Build(cfg)
	r := &Resources{
		IR:        g,
		Listeners: []*listenerv3.Listener{Listener(g)},
		Routes:    []*routev3.RouteConfiguration{RouteConfiguration(g)},
		RateLimit: RateLimitConfig(cfg),
	}
	for i := range g.Pools {
		r.Clusters = append(r.Clusters, PoolCluster(g, &g.Pools[i]))
	}
	for _, s := range []struct{ name, addr, listener string }{
		{contract.ClusterExtProc, g.ExtProcAddress, config.ListenerExtProc},
		{contract.ClusterRateLimit, g.RateLimitAddress, config.ListenerRateLimit},
	} {
		c, err := ServiceCluster(s.name, s.addr)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: address %q: %w", s.name, s.addr, err)
		}
		SecureServiceCluster(c, &cfg.Security, s.listener)
		r.Clusters = append(r.Clusters, c)
	}
	secret, err := fleetSecret(&cfg.Security)
	if err != nil {
		return nil, err
	}
	if err := withFleetSecret(r, secret); err != nil {
		return nil, err
	}
	v := newValidator()
	for _, l := range r.Listeners {
		if err := v.validate(l); err != nil {
			return nil, fmt.Errorf("listener %s: %w", l.Name, err)
		}
	}
	for _, rc := range r.Routes {
		if err := v.validate(rc); err != nil {
			return nil, fmt.Errorf("route configuration %s: %w", rc.Name, err)
		}
	}
	for _, c := range r.Clusters {
		if err := v.validate(c); err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
		}
	}
	return r, nil
}

// ValidateEndpoints validates EDS resources.
func ValidateEndpoints(clas []*endpointv3.ClusterLoadAssignment) error {
	v := newValidator()
	for _, c := range clas {
		if err := v.validate(c); err != nil {
			return fmt.Errorf("endpoints %s: %w", c.ClusterName, err)
		}
	}
	return nil
}
