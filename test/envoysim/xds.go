package envoysim

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// XDSOptions adjust a sim built from xDS resources.
type XDSOptions struct {
	// ExtProcTarget returns the ext_proc address for a filter, by the value
	// of its x-swarmgate-role initial metadata ("router", "upstream"). When
	// nil, the envoy_grpc cluster's static address is used.
	ExtProcTarget func(role string) string
	// ExtProcTargets, when set, spreads the role's streams round robin over
	// several servers (it wins over ExtProcTarget).
	ExtProcTargets func(role string) []string
	// RoleHeader is the initial-metadata key naming the role.
	RoleHeader string
	Seed       uint64
}

const (
	extProcType     = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
	httpOptionsName = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// FromXDS builds a sim from the resources a control plane would send Envoy:
// the listener's HCM filter chain (router-level ext_proc), the route
// configuration it names, the clusters (per-attempt ext_proc in
// HttpProtocolOptions.http_filters) and their ClusterLoadAssignments
// (priorities, locality and endpoint weights, health, metadata).
func FromXDS(lis *listenerv3.Listener, routes []*routev3.RouteConfiguration, clusters []*clusterv3.Cluster,
	endpoints []*endpointv3.ClusterLoadAssignment, opts XDSOptions) (*Sim, error) {
	cfg := Config{Seed: opts.Seed}
	if lis.GetPerConnectionBufferLimitBytes() != nil {
		cfg.BufferLimit = int(lis.GetPerConnectionBufferLimitBytes().GetValue())
	}
	staticAddr := map[string]string{}
	for _, c := range clusters {
		for _, le := range c.GetLoadAssignment().GetEndpoints() {
			for _, e := range le.GetLbEndpoints() {
				staticAddr[c.GetName()] = sockAddr(e.GetEndpoint().GetAddress())
			}
		}
	}
	target := func(gs *corev3.GrpcService) ([]string, map[string]string) {
		md := map[string]string{}
		role := ""
		for _, hv := range gs.GetInitialMetadata() {
			md[hv.GetKey()] = hv.GetValue()
			if opts.RoleHeader == "" || hv.GetKey() == opts.RoleHeader {
				role = hv.GetValue()
			}
		}
		switch {
		case opts.ExtProcTargets != nil:
			return opts.ExtProcTargets(role), md
		case opts.ExtProcTarget != nil:
			return []string{opts.ExtProcTarget(role)}, md
		case gs.GetEnvoyGrpc() != nil:
			return []string{staticAddr[gs.GetEnvoyGrpc().GetClusterName()]}, md
		}
		return []string{gs.GetGoogleGrpc().GetTargetUri()}, md
	}
	if len(lis.GetFilterChains()) == 0 || len(lis.GetFilterChains()[0].GetFilters()) == 0 {
		return nil, fmt.Errorf("envoysim: listener %s has no filter chain", lis.GetName())
	}
	var hcm hcmv3.HttpConnectionManager
	if err := lis.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		return nil, fmt.Errorf("envoysim: listener HCM: %w", err)
	}
	for _, f := range hcm.GetHttpFilters() {
		if f.GetTypedConfig().GetTypeUrl() == extProcType {
			ep, err := filterFromXDS(f.GetTypedConfig(), target)
			if err != nil {
				return nil, err
			}
			cfg.RouterFilter = ep
		}
	}
	rdsName := hcm.GetRds().GetRouteConfigName()
	for _, rc := range routes {
		if rc.GetName() != rdsName && rdsName != "" {
			continue
		}
		for _, vh := range rc.GetVirtualHosts() {
			if l := vh.GetPerRequestBufferLimitBytes(); l != nil && (cfg.BufferLimit == 0 || int(l.GetValue()) < cfg.BufferLimit) { //nolint:staticcheck // as Envoy: min of both limits
				cfg.BufferLimit = int(l.GetValue())
			}
			for _, r := range vh.GetRoutes() {
				cfg.Routes = append(cfg.Routes, routeFromXDS(r))
			}
		}
	}
	cla := map[string]*endpointv3.ClusterLoadAssignment{}
	for _, e := range endpoints {
		cla[e.GetClusterName()] = e
	}
	for _, c := range clusters {
		sc := Cluster{Name: c.GetName()}
		if a := c.GetTypedExtensionProtocolOptions()[httpOptionsName]; a != nil {
			var po httpv3.HttpProtocolOptions
			if err := a.UnmarshalTo(&po); err != nil {
				return nil, fmt.Errorf("envoysim: cluster %s protocol options: %w", c.GetName(), err)
			}
			for _, f := range po.GetHttpFilters() {
				if f.GetTypedConfig().GetTypeUrl() == extProcType {
					ep, err := filterFromXDS(f.GetTypedConfig(), target)
					if err != nil {
						return nil, err
					}
					sc.UpstreamFilter = ep
				}
			}
		}
		load := c.GetLoadAssignment()
		if e := cla[c.GetName()]; e != nil {
			load = e
		}
		for _, le := range load.GetEndpoints() {
			lw := 1
			if w := le.GetLoadBalancingWeight(); w != nil {
				lw = int(w.GetValue())
			}
			for _, e := range le.GetLbEndpoints() {
				ew := 1
				if w := e.GetLoadBalancingWeight(); w != nil {
					ew = int(w.GetValue())
				}
				md := map[string]map[string]string{}
				for ns, st := range e.GetMetadata().GetFilterMetadata() {
					md[ns] = map[string]string{}
					for k, v := range st.GetFields() {
						md[ns][k] = v.GetStringValue()
					}
				}
				h := e.GetHealthStatus()
				sc.Endpoints = append(sc.Endpoints, Endpoint{
					Address:  sockAddr(e.GetEndpoint().GetAddress()),
					Hostname: e.GetEndpoint().GetHostname(),
					Priority: int(le.GetPriority()),
					// Locality-weighted LB picks a locality by its weight,
					// then a host in it: approximated by the product.
					Weight:    lw * ew,
					Unhealthy: h == corev3.HealthStatus_UNHEALTHY || h == corev3.HealthStatus_DRAINING || h == corev3.HealthStatus_TIMEOUT,
					Metadata:  md,
				})
			}
		}
		cfg.Clusters = append(cfg.Clusters, sc)
	}
	return New(cfg)
}

func sockAddr(a *corev3.Address) string {
	sa := a.GetSocketAddress()
	if sa == nil {
		return ""
	}
	return net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))
}

func filterFromXDS(a *anypb.Any, target func(*corev3.GrpcService) ([]string, map[string]string)) (*Filter, error) {
	var ep extprocfilter.ExternalProcessor
	if err := a.UnmarshalTo(&ep); err != nil {
		return nil, fmt.Errorf("envoysim: ext_proc config: %w", err)
	}
	addrs, md := target(ep.GetGrpcService())
	f := &Filter{
		Target:            addrs[0],
		Targets:           addrs,
		InitialMetadata:   md,
		Mode:              ep.GetProcessingMode(),
		AllowModeOverride: ep.GetAllowModeOverride(),
		FailureModeAllow:  ep.GetFailureModeAllow(),
		RequestAttributes: ep.GetRequestAttributes(),
		AllowAllRouting:   ep.GetMutationRules().GetAllowAllRouting().GetValue(),
		AllowEnvoy:        ep.GetMutationRules().GetAllowEnvoy().GetValue(),
		DisallowIsError:   ep.GetMutationRules().GetDisallowIsError().GetValue(),
	}
	if f.Mode == nil {
		f.Mode = &extprocfilter.ProcessingMode{}
	}
	if d := ep.GetMessageTimeout(); d != nil {
		f.MessageTimeout = d.AsDuration()
	}
	f.ReceivingNamespaces = ep.GetMetadataOptions().GetReceivingNamespaces().GetUntyped()
	return f, nil
}

func routeFromXDS(r *routev3.Route) Route {
	out := Route{Name: r.GetName(), PathPrefix: r.GetMatch().GetPrefix(), Headers: map[string]string{}}
	for _, hm := range r.GetMatch().GetHeaders() {
		out.Headers[strings.ToLower(hm.GetName())] = hm.GetStringMatch().GetExact()
	}
	if dr := r.GetDirectResponse(); dr != nil {
		out.DirectStatus = int(dr.GetStatus())
		out.DirectBody = dr.GetBody().GetInlineString()
		out.ResponseHeaders = map[string]string{}
		for _, h := range r.GetResponseHeadersToAdd() {
			out.ResponseHeaders[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
		}
		return out
	}
	ra := r.GetRoute()
	out.Cluster = ra.GetCluster()
	out.ClusterHeader = ra.GetClusterHeader()
	out.Timeout = ra.GetTimeout().AsDuration()
	out.AutoHostRewrite = ra.GetAutoHostRewrite().GetValue()
	if rp := ra.GetRetryPolicy(); rp != nil {
		p := &RetryPolicy{NumRetries: int(rp.GetNumRetries().GetValue())}
		if rp.GetNumRetries() == nil {
			p.NumRetries = 1 // RetryPolicy.num_retries default
		}
		for _, on := range strings.Split(rp.GetRetryOn(), ",") {
			p.RetryOn = append(p.RetryOn, strings.TrimSpace(on))
		}
		for _, c := range rp.GetRetriableStatusCodes() {
			p.RetriableStatusCodes = append(p.RetriableStatusCodes, int(c))
		}
		for _, h := range rp.GetRetriableHeaders() {
			if h.GetPresentMatch() {
				p.RetriableHeaders = append(p.RetriableHeaders, strings.ToLower(h.GetName()))
			}
		}
		for _, hp := range rp.GetRetryHostPredicate() {
			if hp.GetName() == "envoy.retry_host_predicates.previous_hosts" {
				p.PreviousHosts = true
			}
		}
		p.PreviousPriorities = rp.GetRetryPriority().GetName() == "envoy.retry_priorities.previous_priorities"
		p.BackoffBase = rp.GetRetryBackOff().GetBaseInterval().AsDuration()
		p.BackoffMax = rp.GetRetryBackOff().GetMaxInterval().AsDuration()
		p.PerTryTimeout = rp.GetPerTryTimeout().AsDuration()
		if rl := rp.GetRateLimitedRetryBackOff(); rl != nil {
			p.RetryAfterBackoff = true
			p.RateLimitedMax = rl.GetMaxInterval().AsDuration()
		}
		out.Retry = p
	}
	return out
}
