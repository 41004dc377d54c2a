package extproc

import (
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/routing"
)

// clusterNames are the cluster names of one config snapshot's routing
// plan, built once per snapshot: building a name per request was two of
// an exchange's allocations.
type clusterNames struct {
	cfg   *config.Config
	names map[contract.Pool]string
}

func newClusterNames(cfg *config.Config) *clusterNames {
	plan := routing.Plan(cfg)
	n := &clusterNames{cfg: cfg, names: make(map[contract.Pool]string, len(plan))}
	for _, p := range plan {
		n.names[p.Pool] = p.Cluster()
	}
	return n
}

// clusterName is pool's cluster name under cfg. Only the newest snapshot
// is cached: streams still running on an older one (a reload just
// happened) build theirs.
func (s *Server) clusterName(cfg *config.Config, pool contract.Pool) string {
	n := s.clusters.Load()
	if n == nil || n.cfg != cfg {
		if cfg != s.cfg.Load() {
			return pool.Cluster()
		}
		n = newClusterNames(cfg)
		s.clusters.Store(n)
	}
	if name, ok := n.names[pool]; ok {
		return name
	}
	return pool.Cluster()
}
