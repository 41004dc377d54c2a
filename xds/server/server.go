// Package server is swarmgate's xDS control plane: it translates the
// validated config, keeps one snapshot per node group and serves them over
// ADS, State of the World and Delta, to Envoy, to the rate-limit service and
// to ext_proc replicas.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfigservice "github.com/envoyproxy/go-control-plane/ratelimit/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/xds/gatewayconfig"
	"github.com/swarmgate/swarmgate/xds/ir"
	"github.com/swarmgate/swarmgate/xds/translator"
)

// Options configure a ControlPlane. Zero values are usable.
type Options struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: metrics created, not registered
	// Health, when set, drives EDS health (issue: all keys of a backend open),
	// and, when it is a CapacitySource, the pools' locality weights.
	Health HealthSource
	// CapacityEvery is the least interval between two pushes of new weights
	// for the backends' capacity (default 5s); health changes are pushed
	// at once.
	CapacityEvery time.Duration
	// Resolver resolves backend host names; net.DefaultResolver when nil.
	Resolver        Resolver
	ResolveInterval time.Duration // default 30s
	ResolveTimeout  time.Duration // per name, default 2s
	// GRPCNodeGroup, when set, is a node group (node cluster or id) that
	// gets api_listener resources for proxyless gRPC clients.
	GRPCNodeGroup string
	// ServerOptions are added to the gRPC server's (transport credentials:
	// internal/trust.ListenerCredentials).
	ServerOptions []grpc.ServerOption
	// NodeGroups, when set, are the node groups each client certificate
	// identity may subscribe as (security.xds.node_groups; needs mutual
	// TLS) until SetNodeGroups replaces them.
	NodeGroups []config.NodeGroupGrant
}

// ControlPlane holds the last good translation and serves it.
type ControlPlane struct {
	log     *slog.Logger
	metrics *metrics
	cache   cachev3.SnapshotCache
	groups  *nodeGroup

	health          HealthSource
	capacityEvery   time.Duration
	resolver        Resolver
	resolveInterval time.Duration
	resolveTimeout  time.Duration
	grpcGroup       string
	serverOptions   []grpc.ServerOption
	authz           *nodeAuthorizer
	sent            sentVersions // SotW: what each stream was last sent, for NACKs

	mu         sync.Mutex
	res        *translator.Resources // last good; nil before the first config
	state      translator.EndpointState
	dnsNames   []string
	dnsFamily  string // envoy.dns_lookup_family the addresses were picked by
	envoyGroup string
	snaps      map[string]*snapshot // group -> current snapshot
}

// New builds a control plane; call SetConfig, then Run.
func New(opts Options) *ControlPlane {
	cp := &ControlPlane{
		log:             opts.Logger,
		metrics:         newMetrics(opts.Registerer),
		health:          opts.Health,
		capacityEvery:   opts.CapacityEvery,
		resolver:        opts.Resolver,
		resolveInterval: opts.ResolveInterval,
		resolveTimeout:  opts.ResolveTimeout,
		grpcGroup:       opts.GRPCNodeGroup,
		serverOptions:   opts.ServerOptions,
		snaps:           map[string]*snapshot{},
		state:           translator.EndpointState{Unhealthy: map[string]bool{}, Addrs: map[string][]string{}},
	}
	if cp.log == nil {
		cp.log = slog.New(slog.DiscardHandler)
	}
	if cp.resolver == nil {
		cp.resolver = net.DefaultResolver
	}
	if cp.capacityEvery <= 0 {
		cp.capacityEvery = 5 * time.Second
	}
	if cp.resolveInterval <= 0 {
		cp.resolveInterval = 30 * time.Second
	}
	if cp.resolveTimeout <= 0 {
		cp.resolveTimeout = 2 * time.Second
	}
	// ads=false: grpc-go asks for a subset of a type; with ads=true the
	// cache would wait until every resource is named and never answer.
	cp.groups = &nodeGroup{grpc: cp.grpcGroup}
	cp.authz = newNodeAuthorizer(opts.NodeGroups, cp.groups, cp.log)
	cp.cache = cachev3.NewSnapshotCache(false, cacheHash{cp.groups}, cacheLogger{cp.log})
	if cp.health != nil {
		cp.state.Unhealthy = unhealthySet(cp.health.BackendHealth())
		cp.state.Capacity = cp.capacity()
		cp.metrics.setCapacity(nil, cp.state.Capacity)
	}
	return cp
}

// nodeGroup keys snapshots by node group: the node cluster if it names one
// of ours, else the node id if that does (envoyproxy/ratelimit sets only an
// id), else the Envoy gateway group, so an Envoy of an existing mesh (its
// own node cluster) still gets our routes and endpoints. The cache calls ID
// under its own lock, so the gateway group is read atomically, not under
// ControlPlane.mu.
type nodeGroup struct {
	grpc  string
	envoy atomic.Pointer[string]
}

func (h *nodeGroup) ID(n *corev3Node) string {
	envoy := ""
	if p := h.envoy.Load(); p != nil {
		envoy = *p
	}
	known := func(g string) bool {
		return g != "" && (g == envoy || g == contract.NodeRateLimit || g == contract.NodeExtProc || g == h.grpc)
	}
	switch {
	case known(n.GetCluster()):
		return n.GetCluster()
	case known(n.GetId()):
		return n.GetId()
	}
	return envoy
}

// envoyCacheKey is the cache key of the Envoy gateway group, whatever
// envoy.node_cluster calls it (not a valid node cluster, so no group's
// name). The cache files each watch under its node's key; were that the
// name, a rename would strand the watches open under the old name and file
// nodes connecting mid-rename there, and they would get no further push.
const envoyCacheKey = "(envoy gateway)"

// cacheKey is the cache key of a node group's snapshot.
func (h *nodeGroup) cacheKey(group string) string {
	if group == contract.NodeRateLimit || group == contract.NodeExtProc || (group != "" && group == h.grpc) {
		return group
	}
	return envoyCacheKey
}

// cacheHash is the cache's NodeHash: a node's group's cache key.
type cacheHash struct{ groups *nodeGroup }

func (h cacheHash) ID(n *corev3Node) string { return h.groups.cacheKey(h.groups.ID(n)) }

// ErrNoConfig: Run was called before a config was set.
var ErrNoConfig = errors.New("xds: no config set; call SetConfig before Run")

// ErrReservedGroup: envoy.node_cluster may not name another node group.
var ErrReservedGroup = errors.New("envoy.node_cluster names a reserved xDS node group")

// SetConfig translates and validates cfg and, if that succeeds, pushes it to
// every node group. On error nothing changes: the last good snapshots keep
// serving, the error is logged and counted, and returned.
func (cp *ControlPlane) SetConfig(cfg *config.Config) error {
	err := cp.setConfig(cfg)
	if err != nil {
		cp.metrics.rejected.Inc()
		cp.log.Error("config rejected; last good config keeps serving", "source", cfg.Source, "err", err)
	}
	return err
}

func (cp *ControlPlane) setConfig(cfg *config.Config) error {
	start := time.Now()
	group := cfg.Envoy.NodeCluster
	if group == contract.NodeRateLimit || group == contract.NodeExtProc || (cp.grpcGroup != "" && group == cp.grpcGroup) {
		return fmt.Errorf("%w: %q", ErrReservedGroup, group)
	}
	res, err := translator.Translate(cfg)
	if err != nil {
		return fmt.Errorf("translating config: %w", err)
	}
	// cfg is validated and travels as itself, so replicas accept what they
	// get unless a secret reference does not resolve on their side, which
	// they NACK.
	gc, err := gatewayconfig.FromConfig(cfg)
	if err != nil {
		return err
	}
	names := translator.DNSNames(res.IR)
	family := cfg.Envoy.DNSLookupFamily
	cp.mu.Lock()
	var missing []string
	for _, n := range names {
		// Another family: every name's addresses are picked again.
		if _, ok := cp.state.Addrs[n]; !ok || family != cp.dnsFamily {
			missing = append(missing, n)
		}
	}
	cp.mu.Unlock()
	resolved := cp.resolveAll(context.Background(), missing, family)

	cp.mu.Lock()
	defer cp.mu.Unlock()
	addrs := make(map[string][]string, len(names))
	for _, n := range names {
		if a, ok := resolved[n]; ok {
			addrs[n] = a
		} else if a, ok := cp.state.Addrs[n]; ok {
			addrs[n] = a
		}
	}
	state := translator.EndpointState{Unhealthy: cp.state.Unhealthy, Addrs: addrs, Capacity: cp.state.Capacity}
	eps := translator.Endpoints(res.IR, state)
	if err := translator.ValidateEndpoints(eps); err != nil {
		return err
	}
	epsType, err := newTypeResources(asResources(eps))
	if err != nil {
		return err
	}
	envoySnap, err := newSnapshot(map[string][]types.Resource{
		resource.ListenerType: asResources(res.Listeners),
		resource.RouteType:    asResources(res.Routes),
		resource.ClusterType:  asResources(res.Clusters),
	})
	if err != nil {
		return err
	}
	envoySnap = envoySnap.with(resource.EndpointType, epsType)
	snaps := map[string]*snapshot{group: envoySnap}
	if snaps[contract.NodeRateLimit], err = newSnapshot(map[string][]types.Resource{
		resource.RateLimitConfigType: {res.RateLimit},
	}); err != nil {
		return err
	}
	if snaps[contract.NodeExtProc], err = newSnapshot(map[string][]types.Resource{
		gatewayconfig.TypeURL: {gc},
	}); err != nil {
		return err
	}
	if cp.grpcGroup != "" {
		g, err := newSnapshot(map[string][]types.Resource{
			resource.ListenerType: {translator.GRPCListener()},
			resource.RouteType:    asResources(res.Routes),
			resource.ClusterType:  asResources(translator.GRPCClusters(res)),
		})
		if err != nil {
			return err
		}
		snaps[cp.grpcGroup] = g.with(resource.EndpointType, epsType)
	}

	ctx := context.Background()
	if cp.envoyGroup != "" && cp.envoyGroup != group {
		// A rename keeps the cache key (cacheKey): the watches open under
		// it get the new snapshot below.
		delete(cp.snaps, cp.envoyGroup)
	}
	for _, g := range slices.Sorted(maps.Keys(snaps)) {
		if err := cp.cache.SetSnapshot(ctx, cp.groups.cacheKey(g), snaps[g]); err != nil {
			return fmt.Errorf("setting snapshot of %s: %w", g, err)
		}
		cp.snaps[g] = snaps[g]
	}
	cp.res, cp.state, cp.dnsNames, cp.dnsFamily, cp.envoyGroup = res, state, names, family, group
	cp.groups.envoy.Store(&group)
	cp.recordVersionsLocked()
	cp.metrics.pushes.WithLabelValues("full").Inc()
	cp.metrics.pushSeconds.WithLabelValues("full").Observe(time.Since(start).Seconds())
	cp.log.Info("config pushed", "source", cfg.Source, "group", group,
		"clusters", len(res.Clusters), "version", envoySnap.GetVersion(resource.ClusterType),
		"endpoints_version", epsType.version, "took", time.Since(start))
	return nil
}

// pushEndpointsLocked recomputes EDS from the last good config and the
// current endpoint state, for the pools that use a changed backend (all when
// changed is nil); other types keep their versions, so clients get an
// EDS-only update, and a Delta client only the changed assignments.
func (cp *ControlPlane) pushEndpointsLocked(changed map[string]bool) error {
	if cp.res == nil {
		return nil
	}
	start := time.Now()
	var t *typeResources
	var err error
	prev := cp.snaps[cp.envoyGroup].types[resource.EndpointType]
	if changed == nil || prev == nil {
		t, err = newTypeResources(asResources(translator.Endpoints(cp.res.IR, cp.state)))
	} else {
		var rs []types.Resource
		for i := range cp.res.IR.Pools {
			p := &cp.res.IR.Pools[i]
			if slices.ContainsFunc(p.Targets, func(tg ir.Target) bool { return changed[tg.Backend] }) {
				rs = append(rs, translator.PoolEndpoints(p, cp.state))
			}
		}
		t, err = prev.replacing(rs)
	}
	if err != nil {
		cp.log.Error("building endpoints", "err", err)
		return err
	}
	for _, g := range []string{cp.envoyGroup, cp.grpcGroup} {
		s := cp.snaps[g]
		if g == "" || s == nil {
			continue
		}
		next := s.with(resource.EndpointType, t)
		if err := cp.cache.SetSnapshot(context.Background(), cp.groups.cacheKey(g), next); err != nil {
			cp.log.Error("setting endpoints snapshot", "group", g, "err", err)
			return err
		}
		cp.snaps[g] = next
	}
	cp.recordVersionsLocked()
	cp.metrics.pushes.WithLabelValues("endpoints").Inc()
	cp.metrics.pushSeconds.WithLabelValues("endpoints").Observe(time.Since(start).Seconds())
	return nil
}

func (cp *ControlPlane) recordVersionsLocked() {
	cp.metrics.snapshotInfo.Reset()
	for g, s := range cp.snaps {
		for typeURL, t := range s.types {
			cp.metrics.snapshotInfo.WithLabelValues(g, typeURL, t.version).Set(1)
		}
	}
}

// Versions reports the current version per node group and type URL.
func (cp *ControlPlane) Versions() map[string]map[string]string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := make(map[string]map[string]string, len(cp.snaps))
	for g, s := range cp.snaps {
		out[g] = make(map[string]string, len(s.types))
		for typeURL, t := range s.types {
			out[g][typeURL] = t.version
		}
	}
	return out
}

// Run serves ADS (SotW and Delta, plus the per-type discovery services) on
// lis until ctx is done, and runs the health and DNS loops.
//
// SetConfig must have succeeded once before Run: a node that connected
// before any config would be filed under no node group and never answered.
func (cp *ControlPlane) Run(ctx context.Context, lis net.Listener) error {
	cp.mu.Lock()
	ready := cp.res != nil
	cp.mu.Unlock()
	if !ready {
		return ErrNoConfig
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := serverv3.NewServer(ctx, cp.cache, cp.callbacks())
	gs := grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxConcurrentStreams(1 << 20),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// Lets SetNodeGroups stop the responses of a revoked stream.
		grpc.ChainStreamInterceptor(guardStreams),
	}, cp.serverOptions...)...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	endpointservice.RegisterEndpointDiscoveryServiceServer(gs, srv)
	clusterservice.RegisterClusterDiscoveryServiceServer(gs, srv)
	routeservice.RegisterRouteDiscoveryServiceServer(gs, srv)
	listenerservice.RegisterListenerDiscoveryServiceServer(gs, srv)
	rlsconfigservice.RegisterRateLimitConfigDiscoveryServiceServer(gs, srv)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); cp.healthLoop(ctx) }()
	go func() { defer wg.Done(); cp.resolveLoop(ctx) }()
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	cp.log.Info("xDS server listening", "addr", lis.Addr().String())

	var err error
	select {
	case <-ctx.Done():
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			gs.Stop() // xDS streams never end by themselves
		}
		<-errc
	case err = <-errc:
		cancel()
	}
	wg.Wait()
	if errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}
