package envoysim

import (
	"context"
	"errors"
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
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/swarmgate/swarmgate/test/rlsim"
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
	// RateLimitClient is the rate-limit service the HCM's
	// envoy.filters.http.ratelimit filter calls (e.g. a gRPC client of an
	// embedded envoyproxy/ratelimit). When the listener has that filter and
	// this is nil, the service is unreachable, as for an Envoy whose
	// rate-limit cluster has no endpoint: every call fails with Unavailable
	// (the filter then fails open unless failure_mode_deny).
	RateLimitClient rlspb.RateLimitServiceClient
}

// unreachableRLS is a rate-limit service that is never there.
type unreachableRLS struct{}

func (unreachableRLS) ShouldRateLimit(context.Context, *rlspb.RateLimitRequest, ...grpc.CallOption) (*rlspb.RateLimitResponse, error) {
	return nil, status.Error(codes.Unavailable, "envoysim: no rate-limit service configured (XDSOptions.RateLimitClient)")
}

const (
	extProcType     = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
	rateLimitType   = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"
	routerType      = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
	codecType       = "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"
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
	if err := hcmFromXDS(&hcm, &cfg, opts, target); err != nil {
		return nil, err
	}
	rdsName := hcm.GetRds().GetRouteConfigName()
	if rc := hcm.GetRouteConfig(); rc != nil {
		// An inline route configuration is the only one.
		routes, rdsName = []*routev3.RouteConfiguration{rc}, rc.GetName()
	}
	for _, rc := range routes {
		if rc.GetName() != rdsName && rdsName != "" {
			continue
		}
		for _, vh := range rc.GetVirtualHosts() {
			// The stream's buffer limit starts at the connection's and a
			// route's request_body_buffer_limit (else the legacy
			// per_request_buffer_limit_bytes) only ever raises it
			// (source/common/router/config_impl.cc getRequestBodyBufferLimit,
			// source/common/http/conn_manager_impl.cc
			// ActiveStream::refreshBufferLimit, v1.38.0). Routes' own limits
			// are not modelled; the virtual host's applies to all of them.
			limit := uint64(0)
			if l := vh.GetRequestBodyBufferLimit(); l != nil {
				limit = l.GetValue()
			} else if l := vh.GetPerRequestBufferLimitBytes(); l != nil { //nolint:staticcheck // the legacy field, as Envoy falls back to it
				limit = uint64(l.GetValue())
			}
			if limit > 0 && limit < 1<<31 && int(limit) > cfg.RouteBufferLimit {
				cfg.RouteBufferLimit = int(limit)
			}
			for _, r := range vh.GetRoutes() {
				rt, err := routeFromXDS(r)
				if err != nil {
					return nil, err
				}
				// Route configuration, virtual host and route removals all
				// apply (finalizeRequestHeaders, most specific first).
				rt.RequestHeadersToRemove = append(append(append([]string(nil), r.GetRequestHeadersToRemove()...),
					vh.GetRequestHeadersToRemove()...), rc.GetRequestHeadersToRemove()...)
				if len(r.GetRequestHeadersToAdd())+len(vh.GetRequestHeadersToAdd())+len(rc.GetRequestHeadersToAdd()) > 0 {
					return nil, fmt.Errorf("envoysim: route %s: request_headers_to_add is not modelled", r.GetName())
				}
				cfg.Routes = append(cfg.Routes, rt)
			}
		}
	}
	cla := map[string]*endpointv3.ClusterLoadAssignment{}
	for _, e := range endpoints {
		cla[e.GetClusterName()] = e
	}
	for _, c := range clusters {
		sc := Cluster{Name: c.GetName()}
		if err := lbFromXDS(c, &sc); err != nil {
			return nil, err
		}
		if a := c.GetTypedExtensionProtocolOptions()[httpOptionsName]; a != nil {
			var po httpv3.HttpProtocolOptions
			if err := a.UnmarshalTo(&po); err != nil {
				return nil, fmt.Errorf("envoysim: cluster %s protocol options: %w", c.GetName(), err)
			}
			for i, f := range po.GetHttpFilters() {
				switch f.GetTypedConfig().GetTypeUrl() {
				case extProcType:
					ep, err := filterFromXDS(f.GetTypedConfig(), target)
					if err != nil {
						return nil, err
					}
					sc.UpstreamFilter = ep
				case codecType:
					if i != len(po.GetHttpFilters())-1 {
						return nil, fmt.Errorf("envoysim: cluster %s: upstream_codec must be the last upstream filter", c.GetName())
					}
				default:
					return nil, fmt.Errorf("envoysim: cluster %s: upstream filter %s is not modelled", c.GetName(), f.GetTypedConfig().GetTypeUrl())
				}
			}
		}
		load := c.GetLoadAssignment()
		if e := cla[c.GetName()]; e != nil {
			load = e
		}
		if f := load.GetPolicy().GetOverprovisioningFactor(); f != nil {
			sc.OverprovisioningFactor = int(f.GetValue())
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
				if h == corev3.HealthStatus_DEGRADED {
					return nil, fmt.Errorf("envoysim: cluster %s: DEGRADED endpoints are not modelled", c.GetName())
				}
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
	f.ForwardingNamespaces = ep.GetMetadataOptions().GetForwardingNamespaces().GetUntyped()
	if d := ep.GetMaxMessageTimeout(); d != nil {
		f.MaxMessageTimeout = d.AsDuration()
	}
	f.StatusOnError = int(ep.GetStatusOnError().GetCode())
	switch ep.GetRouteCacheAction() {
	case extprocfilter.ExternalProcessor_CLEAR:
		f.RouteCacheAction = "CLEAR"
	case extprocfilter.ExternalProcessor_RETAIN:
		f.RouteCacheAction = "RETAIN"
	}
	if ep.GetDisableClearRouteCache() {
		f.RouteCacheAction = "RETAIN"
	}
	if err := unmodelledExtProc(&ep); err != nil {
		return nil, err
	}
	return f, nil
}

// unmodelledExtProc rejects ext_proc settings the sim does not model, so a
// config that relies on them fails here instead of passing untested.
func unmodelledExtProc(ep *extprocfilter.ExternalProcessor) error {
	mr := ep.GetMutationRules()
	switch {
	case ep.GetObservabilityMode(), ep.GetSendBodyWithoutWaitingForHeaderResponse(), ep.GetDisableImmediateResponse():
		return errors.New("envoysim: ext_proc observability_mode / send_body_without_waiting_for_header_response / disable_immediate_response are not modelled")
	case mr.GetDisallowAll().GetValue(), mr.GetDisallowSystem().GetValue(), mr.GetAllowExpression() != nil, mr.GetDisallowExpression() != nil:
		return errors.New("envoysim: ext_proc mutation_rules disallow_all / disallow_system / expressions are not modelled")
	case len(ep.GetAllowedOverrideModes()) > 0:
		return errors.New("envoysim: ext_proc allowed_override_modes is not modelled")
	case len(ep.GetMetadataOptions().GetForwardingNamespaces().GetTyped()) > 0, len(ep.GetMetadataOptions().GetReceivingNamespaces().GetTyped()) > 0,
		ep.GetMetadataOptions().GetClusterMetadataForwardingNamespaces() != nil:
		return errors.New("envoysim: ext_proc typed / cluster metadata namespaces are not modelled")
	case len(ep.GetResponseAttributes()) > 0:
		return errors.New("envoysim: ext_proc response_attributes are not modelled")
	}
	m := ep.GetProcessingMode()
	for _, b := range []extprocfilter.ProcessingMode_BodySendMode{m.GetRequestBodyMode(), m.GetResponseBodyMode()} {
		if b == extprocfilter.ProcessingMode_BUFFERED_PARTIAL || b == extprocfilter.ProcessingMode_FULL_DUPLEX_STREAMED {
			return fmt.Errorf("envoysim: ext_proc body mode %s is not modelled", b)
		}
	}
	return nil
}

// hcmFromXDS reads the HCM: request-id flags and the filter chain, which
// must be [ext_proc] → [ratelimit] → router, the order the sim runs.
func hcmFromXDS(hcm *hcmv3.HttpConnectionManager, cfg *Config, opts XDSOptions, target func(*corev3.GrpcService) ([]string, map[string]string)) error {
	cfg.LocalReply = hcm.GetLocalReplyConfig()
	cfg.UseRemoteAddress = hcm.GetUseRemoteAddress().GetValue()
	cfg.PreserveExternalRequestID = hcm.GetPreserveExternalRequestId()
	if g := hcm.GetGenerateRequestId(); g != nil && !g.GetValue() {
		return errors.New("envoysim: HCM generate_request_id false is not modelled")
	}
	if hcm.GetInternalAddressConfig() != nil || hcm.GetXffNumTrustedHops() > 0 {
		return errors.New("envoysim: HCM internal_address_config / xff_num_trusted_hops are not modelled (every request is external)")
	}
	order := 0
	for _, f := range hcm.GetHttpFilters() {
		tc := f.GetTypedConfig()
		switch tc.GetTypeUrl() {
		case extProcType:
			if order > 0 {
				return errors.New("envoysim: the sim runs ext_proc before ratelimit and router")
			}
			ep, err := filterFromXDS(tc, target)
			if err != nil {
				return err
			}
			cfg.RouterFilter, order = ep, 1
		case rateLimitType:
			if order > 1 {
				return errors.New("envoysim: the sim runs ratelimit after ext_proc and before router")
			}
			var rl ratelimitv3.RateLimit
			if err := tc.UnmarshalTo(&rl); err != nil {
				return fmt.Errorf("envoysim: ratelimit config: %w", err)
			}
			client := opts.RateLimitClient
			if client == nil {
				client = unreachableRLS{}
			}
			f, err := rlsim.New(&rl, client)
			if err != nil {
				return fmt.Errorf("envoysim: %w", err)
			}
			cfg.RateLimit, order = f, 2
		case routerType:
			var rt routerv3.Router
			if err := tc.UnmarshalTo(&rt); err != nil {
				return fmt.Errorf("envoysim: router config: %w", err)
			}
			cfg.SuppressEnvoyHeaders = rt.GetSuppressEnvoyHeaders()
			order = 3
		default:
			return fmt.Errorf("envoysim: HCM filter %s is not modelled", tc.GetTypeUrl())
		}
	}
	if order != 3 {
		return errors.New("envoysim: the HCM filter chain must end with the router")
	}
	return nil
}

// lbFromXDS reads what the load balancer and the retry budget use:
// ROUND_ROBIN only; common_lb_config.healthy_panic_threshold; the DEFAULT
// priority circuit-breaker thresholds (retry_budget, max_retries).
func lbFromXDS(c *clusterv3.Cluster, sc *Cluster) error {
	if c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN {
		return fmt.Errorf("envoysim: cluster %s: lb_policy %s is not modelled", c.GetName(), c.GetLbPolicy())
	}
	clc := c.GetCommonLbConfig()
	if p := clc.GetHealthyPanicThreshold(); p != nil {
		v := p.GetValue()
		sc.HealthyPanicThreshold = &v
	}
	if clc.GetZoneAwareLbConfig() != nil || clc.GetConsistentHashingLbConfig() != nil {
		return fmt.Errorf("envoysim: cluster %s: zone-aware / consistent-hashing lb config is not modelled", c.GetName())
	}
	for _, t := range c.GetCircuitBreakers().GetThresholds() {
		if t.GetPriority() != corev3.RoutingPriority_DEFAULT {
			continue
		}
		if rb := t.GetRetryBudget(); rb != nil {
			b := &RetryBudget{BudgetPercent: 20}
			if p := rb.GetBudgetPercent(); p != nil {
				b.BudgetPercent = p.GetValue()
			}
			if m := rb.GetMinRetryConcurrency(); m != nil {
				v := int(m.GetValue())
				b.MinRetryConcurrency = &v
			}
			sc.RetryBudget = b
		}
		if m := t.GetMaxRetries(); m != nil {
			v := int(m.GetValue())
			sc.MaxRetries = &v
		}
	}
	return nil
}

func routeFromXDS(r *routev3.Route) (Route, error) {
	out := Route{Name: r.GetName(), PathPrefix: r.GetMatch().GetPrefix(), Headers: map[string]string{}}
	for _, hm := range r.GetMatch().GetHeaders() {
		out.Headers[strings.ToLower(hm.GetName())] = hm.GetStringMatch().GetExact()
	}
	for _, mm := range r.GetMatch().GetDynamicMetadata() {
		path := mm.GetPath()
		if len(path) != 1 || !mm.GetValue().GetPresentMatch() || mm.GetInvert() {
			return out, fmt.Errorf("envoysim: route %s: only present_match dynamic_metadata matchers on one key are modelled", r.GetName())
		}
		if out.MetadataPresent == nil {
			out.MetadataPresent = map[string]string{}
		}
		out.MetadataPresent[mm.GetFilter()] = path[0].GetKey()
	}
	if dr := r.GetDirectResponse(); dr != nil {
		out.DirectStatus = int(dr.GetStatus())
		out.DirectBody = dr.GetBody().GetInlineString()
		out.ResponseHeaders = map[string]string{}
		for _, h := range r.GetResponseHeadersToAdd() {
			out.ResponseHeaders[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
		}
		return out, nil
	}
	ra := r.GetRoute()
	if ra.GetAppendXForwardedHost() {
		return out, fmt.Errorf("envoysim: route %s: append_x_forwarded_host is not modelled", r.GetName())
	}
	out.Cluster = ra.GetCluster()
	out.ClusterHeader = ra.GetClusterHeader()
	switch ra.GetClusterNotFoundResponseCode() {
	case routev3.RouteAction_NOT_FOUND:
		out.ClusterNotFoundStatus = 404
	case routev3.RouteAction_INTERNAL_SERVER_ERROR:
		out.ClusterNotFoundStatus = 500
	}
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
			for _, h := range rl.GetResetHeaders() {
				p.ResetHeaders = append(p.ResetHeaders, ResetHeader{Name: strings.ToLower(h.GetName()), Format: h.GetFormat().String()})
			}
			p.RateLimitedMax = rl.GetMaxInterval().AsDuration()
		}
		p.HostSelectionMaxAttempts = int(rp.GetHostSelectionRetryMaxAttempts())
		if p.PreviousPriorities {
			var pp previousprioritiesv3.PreviousPrioritiesConfig
			if err := rp.GetRetryPriority().GetTypedConfig().UnmarshalTo(&pp); err == nil {
				p.PreviousPrioritiesUpdateFrequency = int(pp.GetUpdateFrequency())
			}
		} else if rp.GetRetryPriority() != nil {
			return out, fmt.Errorf("envoysim: route %s: retry_priority %s is not modelled", r.GetName(), rp.GetRetryPriority().GetName())
		}
		for _, hp := range rp.GetRetryHostPredicate() {
			if hp.GetName() != "envoy.retry_host_predicates.previous_hosts" {
				return out, fmt.Errorf("envoysim: route %s: retry_host_predicate %s is not modelled", r.GetName(), hp.GetName())
			}
		}
		for _, h := range rp.GetRetriableHeaders() {
			if !h.GetPresentMatch() {
				return out, fmt.Errorf("envoysim: route %s: only present_match retriable_headers are modelled", r.GetName())
			}
		}
		if len(rp.GetRetriableRequestHeaders()) > 0 {
			return out, fmt.Errorf("envoysim: route %s: retriable_request_headers is not modelled", r.GetName())
		}
		for _, on := range p.RetryOn {
			switch on {
			case "5xx", "gateway-error", "reset", "connect-failure", "retriable-4xx", "retriable-status-codes", "retriable-headers", "envoy-ratelimited":
			default:
				return out, fmt.Errorf("envoysim: route %s: retry_on %q is not modelled", r.GetName(), on)
			}
		}
		out.Retry = p
	}
	return out, nil
}
