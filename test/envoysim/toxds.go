package envoysim

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	ratelimitconfv3 "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// XDS is what a real Envoy needs to run a Config: one listener (its HCM
// carries the route configuration inline) and the clusters, the ext_proc
// and rate-limit services' included. The differential tests
// (differential_test.go) push it to Envoy over ADS.
type XDS struct {
	Listener *listenerv3.Listener
	Clusters []*clusterv3.Cluster
}

// Validate runs each resource's generated validation, the typed configs
// inside them included (ValidateAll does not descend into Any).
func (x *XDS) Validate() error {
	msgs := []proto.Message{x.Listener}
	for _, c := range x.Clusters {
		msgs = append(msgs, c)
	}
	for _, m := range msgs {
		if err := validateDeep(m); err != nil {
			return err
		}
	}
	return nil
}

type validator interface{ ValidateAll() error }

// validateDeep validates m and every Any inside it.
func validateDeep(m proto.Message) error {
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("envoysim: %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
		}
	}
	var err error
	var walk func(protoreflect.Message)
	walk = func(pm protoreflect.Message) {
		pm.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if err != nil {
				return false
			}
			switch {
			case fd.Message() == nil:
			case fd.IsMap():
				if fd.MapValue().Message() != nil {
					v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
						visit(mv.Message(), walk, &err)
						return err == nil
					})
				}
			case fd.IsList():
				for i := 0; i < v.List().Len(); i++ {
					visit(v.List().Get(i).Message(), walk, &err)
				}
			default:
				visit(v.Message(), walk, &err)
			}
			return err == nil
		})
	}
	walk(m.ProtoReflect())
	return err
}

// visit unpacks an Any and validates it, or walks into any other message.
func visit(pm protoreflect.Message, walk func(protoreflect.Message), err *error) {
	a, ok := pm.Interface().(*anypb.Any)
	if !ok {
		walk(pm)
		return
	}
	inner, uerr := a.UnmarshalNew()
	if uerr != nil {
		*err = fmt.Errorf("envoysim: %s: %w", a.GetTypeUrl(), uerr)
		return
	}
	if verr := validateDeep(inner); verr != nil {
		*err = verr
	}
}

// XDSTarget says where the generated listener lives and which rate-limit
// filter, if any, it runs (Config.RateLimit is the sim's filter, built from
// the same proto).
type XDSTarget struct {
	ListenerName string
	Port         int
	// RateLimit is the HCM's envoy.filters.http.ratelimit config; its
	// rate_limit_service is set to RateLimitAddr.
	RateLimit     *ratelimitv3.RateLimit
	RateLimitAddr string
}

// ToXDS is the inverse of FromXDS for what the sim models: the Envoy
// configuration that should behave as cfg does. Settings with an Envoy
// default are left unset when cfg leaves them at the sim's default, so the
// comparison also checks that the sim's defaults are Envoy's.
func ToXDS(cfg Config, tg XDSTarget) (*XDS, error) {
	out := &XDS{}
	grpcClusters := map[string]*clusterv3.Cluster{}
	grpcService := func(addrs []string, md map[string]string) (*corev3.GrpcService, error) {
		name := "grpc_" + strings.Join(addrs, "_")
		if grpcClusters[name] == nil {
			c, err := staticCluster(name, addrs, true)
			if err != nil {
				return nil, err
			}
			grpcClusters[name] = c
		}
		gs := &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: name}}}
		keys := make([]string, 0, len(md))
		for k := range md {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			gs.InitialMetadata = append(gs.InitialMetadata, &corev3.HeaderValue{Key: k, Value: md[k]})
		}
		return gs, nil
	}

	var filters []*hcmv3.HttpFilter
	if f := cfg.RouterFilter; f != nil {
		a, err := extProcToXDS(f, grpcService)
		if err != nil {
			return nil, err
		}
		filters = append(filters, &hcmv3.HttpFilter{Name: "envoy.filters.http.ext_proc", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}})
	}
	if tg.RateLimit != nil {
		rl := proto.Clone(tg.RateLimit).(*ratelimitv3.RateLimit)
		gs, err := grpcService([]string{tg.RateLimitAddr}, nil)
		if err != nil {
			return nil, err
		}
		rl.RateLimitService = &ratelimitconfv3.RateLimitServiceConfig{GrpcService: gs, TransportApiVersion: corev3.ApiVersion_V3}
		a, err := anypb.New(rl)
		if err != nil {
			return nil, err
		}
		filters = append(filters, &hcmv3.HttpFilter{Name: "envoy.filters.http.ratelimit", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}})
	}
	router, _ := anypb.New(&routerv3.Router{SuppressEnvoyHeaders: cfg.SuppressEnvoyHeaders})
	filters = append(filters, &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}})

	vh := &routev3.VirtualHost{Name: "all", Domains: []string{"*"}}
	if cfg.RouteBufferLimit > 0 {
		vh.RequestBodyBufferLimit = wrapperspb.UInt64(uint64(cfg.RouteBufferLimit))
	}
	for _, r := range cfg.Routes {
		rt, err := routeToXDS(r)
		if err != nil {
			return nil, err
		}
		vh.Routes = append(vh.Routes, rt)
	}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "envoysim",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: "routes", VirtualHosts: []*routev3.VirtualHost{vh}}},
		HttpFilters:               filters,
		LocalReplyConfig:          cfg.LocalReply,
		PreserveExternalRequestId: cfg.PreserveExternalRequestID,
	}
	if cfg.UseRemoteAddress {
		hcm.UseRemoteAddress = wrapperspb.Bool(true)
	}
	ha, err := anypb.New(hcm)
	if err != nil {
		return nil, err
	}
	out.Listener = &listenerv3.Listener{
		Name:    tg.ListenerName,
		Address: socketAddress("127.0.0.1", tg.Port),
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: ha}}}}},
	}
	if cfg.BufferLimit > 0 {
		out.Listener.PerConnectionBufferLimitBytes = wrapperspb.UInt32(uint32(cfg.BufferLimit))
	}

	for _, c := range cfg.Clusters {
		xc, err := clusterToXDS(c, grpcService)
		if err != nil {
			return nil, err
		}
		out.Clusters = append(out.Clusters, xc)
	}
	names := make([]string, 0, len(grpcClusters))
	for n := range grpcClusters {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		out.Clusters = append(out.Clusters, grpcClusters[n])
	}
	return out, nil
}

func socketAddress(host string, port int) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)}}}}
}

func splitAddr(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("envoysim: address %q: %w", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("envoysim: address %q: %w", addr, err)
	}
	return h, n, nil
}

// staticCluster is a STATIC cluster of addrs; grpc ones speak HTTP/2.
func staticCluster(name string, addrs []string, grpc bool) (*clusterv3.Cluster, error) {
	le := &endpointv3.LocalityLbEndpoints{}
	for _, a := range addrs {
		h, p, err := splitAddr(a)
		if err != nil {
			return nil, err
		}
		le.LbEndpoints = append(le.LbEndpoints, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{
			Endpoint: &endpointv3.Endpoint{Address: socketAddress(h, p)}}})
	}
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(2 * time.Second),
		LoadAssignment:       &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{le}},
	}
	if grpc {
		po, err := anypb.New(&httpv3.HttpProtocolOptions{UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
				Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}}}}})
		if err != nil {
			return nil, err
		}
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpOptionsName: po}
	}
	return c, nil
}

func extProcToXDS(f *Filter, grpcService func([]string, map[string]string) (*corev3.GrpcService, error)) (*anypb.Any, error) {
	addrs := f.Targets
	if len(addrs) == 0 {
		addrs = []string{f.Target}
	}
	gs, err := grpcService(addrs, f.InitialMetadata)
	if err != nil {
		return nil, err
	}
	ep := &extprocfilter.ExternalProcessor{
		GrpcService:       gs,
		ProcessingMode:    f.Mode,
		AllowModeOverride: f.AllowModeOverride,
		FailureModeAllow:  f.FailureModeAllow,
		RequestAttributes: f.RequestAttributes,
	}
	if f.MessageTimeout > 0 {
		ep.MessageTimeout = durationpb.New(f.MessageTimeout)
	}
	if f.MaxMessageTimeout > 0 {
		ep.MaxMessageTimeout = durationpb.New(f.MaxMessageTimeout)
	}
	if f.AllowAllRouting || f.AllowEnvoy || f.DisallowIsError {
		ep.MutationRules = &mutationrulesv3.HeaderMutationRules{}
		if f.AllowAllRouting {
			ep.MutationRules.AllowAllRouting = wrapperspb.Bool(true)
		}
		if f.AllowEnvoy {
			ep.MutationRules.AllowEnvoy = wrapperspb.Bool(true)
		}
		if f.DisallowIsError {
			ep.MutationRules.DisallowIsError = wrapperspb.Bool(true)
		}
	}
	if len(f.ReceivingNamespaces) > 0 || len(f.ForwardingNamespaces) > 0 {
		ep.MetadataOptions = &extprocfilter.MetadataOptions{}
		if len(f.ReceivingNamespaces) > 0 {
			ep.MetadataOptions.ReceivingNamespaces = &extprocfilter.MetadataOptions_MetadataNamespaces{Untyped: f.ReceivingNamespaces}
		}
		if len(f.ForwardingNamespaces) > 0 {
			ep.MetadataOptions.ForwardingNamespaces = &extprocfilter.MetadataOptions_MetadataNamespaces{Untyped: f.ForwardingNamespaces}
		}
	}
	if f.StatusOnError >= 200 {
		ep.StatusOnError = &typev3.HttpStatus{Code: typev3.StatusCode(f.StatusOnError)}
	}
	switch f.RouteCacheAction {
	case "CLEAR":
		ep.RouteCacheAction = extprocfilter.ExternalProcessor_CLEAR
	case "RETAIN":
		ep.RouteCacheAction = extprocfilter.ExternalProcessor_RETAIN
	}
	return anypb.New(ep)
}

func routeToXDS(r Route) (*routev3.Route, error) {
	prefix := r.PathPrefix
	if prefix == "" {
		prefix = "/"
	}
	out := &routev3.Route{Name: r.Name, Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}},
		RequestHeadersToRemove: r.RequestHeadersToRemove}
	nss := make([]string, 0, len(r.MetadataPresent))
	for ns := range r.MetadataPresent {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	for _, ns := range nss {
		out.Match.DynamicMetadata = append(out.Match.DynamicMetadata, &matcherv3.MetadataMatcher{Filter: ns,
			Path:  []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: r.MetadataPresent[ns]}}},
			Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_PresentMatch{PresentMatch: true}}})
	}
	keys := make([]string, 0, len(r.Headers))
	for k := range r.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out.Match.Headers = append(out.Match.Headers, &routev3.HeaderMatcher{Name: k, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
			StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: r.Headers[k]}}}})
	}
	if r.DirectStatus != 0 {
		out.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: uint32(r.DirectStatus)}}
		if r.DirectBody != "" {
			out.GetDirectResponse().Body = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: r.DirectBody}}
		}
		for k, v := range r.ResponseHeaders {
			out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}})
		}
		return out, nil
	}
	ra := &routev3.RouteAction{}
	if r.ClusterHeader != "" {
		ra.ClusterSpecifier = &routev3.RouteAction_ClusterHeader{ClusterHeader: r.ClusterHeader}
	} else {
		ra.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: r.Cluster}
	}
	if r.Timeout > 0 {
		ra.Timeout = durationpb.New(r.Timeout)
	}
	switch r.ClusterNotFoundStatus {
	case 404:
		ra.ClusterNotFoundResponseCode = routev3.RouteAction_NOT_FOUND
	case 500:
		ra.ClusterNotFoundResponseCode = routev3.RouteAction_INTERNAL_SERVER_ERROR
	}
	if r.AutoHostRewrite {
		ra.HostRewriteSpecifier = &routev3.RouteAction_AutoHostRewrite{AutoHostRewrite: wrapperspb.Bool(true)}
	}
	if p := r.Retry; p != nil {
		rp, err := retryToXDS(p)
		if err != nil {
			return nil, err
		}
		ra.RetryPolicy = rp
	}
	out.Action = &routev3.Route_Route{Route: ra}
	return out, nil
}

func retryToXDS(p *RetryPolicy) (*routev3.RetryPolicy, error) {
	rp := &routev3.RetryPolicy{RetryOn: strings.Join(p.RetryOn, ","), NumRetries: wrapperspb.UInt32(uint32(p.NumRetries)),
		HostSelectionRetryMaxAttempts: int64(p.HostSelectionMaxAttempts)}
	for _, c := range p.RetriableStatusCodes {
		rp.RetriableStatusCodes = append(rp.RetriableStatusCodes, uint32(c))
	}
	for _, h := range p.RetriableHeaders {
		rp.RetriableHeaders = append(rp.RetriableHeaders, &routev3.HeaderMatcher{Name: h, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}})
	}
	if p.PerTryTimeout > 0 {
		rp.PerTryTimeout = durationpb.New(p.PerTryTimeout)
	}
	if p.PreviousHosts {
		a, _ := anypb.New(&previoushostsv3.PreviousHostsPredicate{})
		rp.RetryHostPredicate = []*routev3.RetryPolicy_RetryHostPredicate{{Name: "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: a}}}
	}
	if p.PreviousPriorities {
		uf := p.PreviousPrioritiesUpdateFrequency
		if uf == 0 {
			uf = 1
		}
		a, _ := anypb.New(&previousprioritiesv3.PreviousPrioritiesConfig{UpdateFrequency: int32(uf)})
		rp.RetryPriority = &routev3.RetryPolicy_RetryPriority{Name: "envoy.retry_priorities.previous_priorities",
			ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: a}}
	}
	if p.BackoffBase > 0 {
		rp.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(p.BackoffBase)}
		if p.BackoffMax > 0 {
			rp.RetryBackOff.MaxInterval = durationpb.New(p.BackoffMax)
		}
	}
	if hs := p.resetHeaders(); len(hs) > 0 {
		rl := &routev3.RetryPolicy_RateLimitedRetryBackOff{}
		for _, h := range hs {
			f := routev3.RetryPolicy_SECONDS
			if h.Format == "UNIX_TIMESTAMP" {
				f = routev3.RetryPolicy_UNIX_TIMESTAMP
			}
			rl.ResetHeaders = append(rl.ResetHeaders, &routev3.RetryPolicy_ResetHeader{Name: h.Name, Format: f})
		}
		if p.RateLimitedMax > 0 {
			rl.MaxInterval = durationpb.New(p.RateLimitedMax)
		}
		rp.RateLimitedRetryBackOff = rl
	}
	return rp, nil
}

func clusterToXDS(c Cluster, grpcService func([]string, map[string]string) (*corev3.GrpcService, error)) (*clusterv3.Cluster, error) {
	out := &clusterv3.Cluster{
		Name:                 c.Name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(2 * time.Second),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
	}
	if c.HealthyPanicThreshold != nil {
		out.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: *c.HealthyPanicThreshold}}
	}
	if c.RetryBudget != nil || c.MaxRetries != nil {
		th := &clusterv3.CircuitBreakers_Thresholds{}
		if b := c.RetryBudget; b != nil {
			th.RetryBudget = &clusterv3.CircuitBreakers_Thresholds_RetryBudget{}
			if b.BudgetPercent > 0 {
				th.RetryBudget.BudgetPercent = &typev3.Percent{Value: b.BudgetPercent}
			}
			if b.MinRetryConcurrency != nil {
				th.RetryBudget.MinRetryConcurrency = wrapperspb.UInt32(uint32(*b.MinRetryConcurrency))
			}
		}
		if c.MaxRetries != nil {
			th.MaxRetries = wrapperspb.UInt32(uint32(*c.MaxRetries))
		}
		out.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{th}}
	}
	byPrio := map[int]*endpointv3.LocalityLbEndpoints{}
	var prios []int
	for _, e := range c.Endpoints {
		h, p, err := splitAddr(e.Address)
		if err != nil {
			return nil, err
		}
		le := byPrio[e.Priority]
		if le == nil {
			le = &endpointv3.LocalityLbEndpoints{Priority: uint32(e.Priority)}
			byPrio[e.Priority] = le
			prios = append(prios, e.Priority)
		}
		lb := &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: socketAddress(h, p), Hostname: e.Hostname}}, HealthStatus: corev3.HealthStatus_HEALTHY}
		if e.Unhealthy {
			lb.HealthStatus = corev3.HealthStatus_UNHEALTHY
		}
		if e.Weight > 0 {
			lb.LoadBalancingWeight = wrapperspb.UInt32(uint32(e.Weight))
		}
		if len(e.Metadata) > 0 {
			lb.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
			for ns, kv := range e.Metadata {
				f := map[string]any{}
				for k, v := range kv {
					f[k] = v
				}
				s, err := structpb.NewStruct(f)
				if err != nil {
					return nil, err
				}
				lb.Metadata.FilterMetadata[ns] = s
			}
		}
		le.LbEndpoints = append(le.LbEndpoints, lb)
	}
	sort.Ints(prios)
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: c.Name}
	for _, p := range prios {
		cla.Endpoints = append(cla.Endpoints, byPrio[p])
	}
	if c.OverprovisioningFactor > 0 {
		cla.Policy = &endpointv3.ClusterLoadAssignment_Policy{OverprovisioningFactor: wrapperspb.UInt32(uint32(c.OverprovisioningFactor))}
	}
	out.LoadAssignment = cla
	if f := c.UpstreamFilter; f != nil {
		ep, err := extProcToXDS(f, grpcService)
		if err != nil {
			return nil, err
		}
		codec, _ := anypb.New(&upstreamcodecv3.UpstreamCodec{})
		po, err := anypb.New(&httpv3.HttpProtocolOptions{
			UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}}}},
			HttpFilters: []*hcmv3.HttpFilter{
				{Name: "envoy.filters.http.ext_proc", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: ep}},
				{Name: "envoy.filters.http.upstream_codec", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: codec}},
			}})
		if err != nil {
			return nil, err
		}
		out.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpOptionsName: po}
	}
	return out, nil
}
