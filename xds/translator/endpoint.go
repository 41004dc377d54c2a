package translator

import (
	"net"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/xds/ir"
)

// EndpointState is what changes between config edits: backend health (from
// the key pools) and DNS answers. Only EDS depends on it.
type EndpointState struct {
	// Unhealthy lists backends with no usable key; absent means healthy.
	Unhealthy map[string]bool
	// Addrs maps a backend DNS name to its IP addresses. EDS endpoints must
	// be IP addresses (Envoy does not resolve names in EDS), so the control
	// plane resolves them; a name without an answer yields an empty
	// locality, and traffic fails over to the next priority.
	Addrs map[string][]string
}

// Endpoints is the EDS ClusterLoadAssignment of every pool.
func Endpoints(g *ir.Gateway, st EndpointState) []*endpointv3.ClusterLoadAssignment {
	out := make([]*endpointv3.ClusterLoadAssignment, 0, len(g.Pools))
	for i := range g.Pools {
		out = append(out, PoolEndpoints(&g.Pools[i], st))
	}
	return out
}

// PoolEndpoints is one pool's assignment: one locality per target carrying
// its priority and weight. An unhealthy backend's locality stays, with no
// endpoints: the priority's health drops, so Envoy spills its load to the
// next priority (endpoint weights cannot be 0, and a locality weight of 0
// would only move load inside the priority). Endpoints marked UNHEALTHY
// instead were still picked by Envoy 1.38.3 from the second time the same
// host went unhealthy (TestPromiseOutageFailover: 15-24 client 503s per
// run); a changed host set is applied by every release.
// https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/upstream/load_balancing/priority
func PoolEndpoints(p *ir.Pool, st EndpointState) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: p.Cluster}
	for _, t := range p.Targets {
		health := corev3.HealthStatus_HEALTHY
		if st.Unhealthy[t.Backend] {
			health = corev3.HealthStatus_UNHEALTHY
		}
		loc := &endpointv3.LocalityLbEndpoints{
			Locality:            &corev3.Locality{Region: contract.MetadataNamespace, Zone: t.Backend},
			LoadBalancingWeight: u32(t.Weight),
			Priority:            t.Priority,
		}
		if health == corev3.HealthStatus_HEALTHY {
			for _, ip := range hostAddrs(t.Host, st.Addrs) {
				loc.LbEndpoints = append(loc.LbEndpoints, lbEndpoint(&t, ip, health))
			}
		}
		cla.Endpoints = append(cla.Endpoints, loc)
	}
	return cla
}

func hostAddrs(host string, addrs map[string][]string) []string {
	if net.ParseIP(host) != nil {
		return []string{host}
	}
	ips := slices.Clone(addrs[host])
	slices.Sort(ips)
	return slices.Compact(ips)
}

func lbEndpoint(t *ir.Target, ip string, health corev3.HealthStatus) *endpointv3.LbEndpoint {
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		contract.MetadataNamespace: {Fields: map[string]*structpb.Value{
			contract.EndpointBackend:       structpb.NewStringValue(t.Backend),
			contract.EndpointUpstreamModel: structpb.NewStringValue(t.UpstreamModel),
		}},
	}}
	if t.TLS {
		md.FilterMetadata["envoy.transport_socket_match"] = &structpb.Struct{Fields: map[string]*structpb.Value{
			TransportSocketMatchKey: structpb.NewStringValue(t.Backend),
		}}
	}
	return &endpointv3.LbEndpoint{
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address:  socketAddress(ip, t.Port),
			Hostname: t.ServerName, // auto_host_rewrite uses it
		}},
		HealthStatus: health,
		Metadata:     md,
	}
}

func socketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// DNSNames lists the backend host names that need resolving (sorted).
func DNSNames(g *ir.Gateway) []string {
	var names []string
	for i := range g.Pools {
		for _, t := range g.Pools[i].Targets {
			if net.ParseIP(t.Host) == nil {
				names = append(names, t.Host)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
