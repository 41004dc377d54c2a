package translator

import (
	"math"
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
	// Capacity maps a backend to what its keys can take as learned from
	// the provider (keypool.Pools.BackendCapacity); absent: unknown. See
	// capacityWeights.
	Capacity map[string]contract.Capacity
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
//
// A pool none of whose targets is healthy keeps them all: there is nowhere
// to fail over to, and Envoy's own "no healthy upstream" refused at once a
// request the queue had admitted while a key had room (its keys came to
// rest, the provider having said nothing remains, between its admission
// and its routing). Routed, its attempt's filter waits for the soonest key
// within its bound, or answers in the client's shape with Retry-After.
func PoolEndpoints(p *ir.Pool, st EndpointState) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: p.Cluster}
	weights := capacityWeights(p.Targets, st.Capacity)
	someHealthy := slices.ContainsFunc(p.Targets, func(t ir.Target) bool {
		return !st.Unhealthy[t.Backend] && len(hostAddrs(t.Host, st.Addrs)) > 0
	})
	for i, t := range p.Targets {
		health := corev3.HealthStatus_HEALTHY
		if st.Unhealthy[t.Backend] && someHealthy {
			health = corev3.HealthStatus_UNHEALTHY
		}
		loc := &endpointv3.LocalityLbEndpoints{
			Locality:            &corev3.Locality{Region: contract.MetadataNamespace, Zone: t.Backend},
			LoadBalancingWeight: u32(weights[i]),
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

// capacityScale is what a priority's locality weights sum to (about) when
// they follow the backends' capacity.
const capacityScale = 1000

// capacityWeights are the targets' locality weights: the configured
// weights, or, in a priority with more than one target whose backends'
// capacities are all known, each target's weight times the first attempts
// its backend can take, scaled to sum to about capacityScale (each at
// least 1). Envoy splits a priority's requests by locality weight, and
// admission paces to the sum of the keys' capacity, so a split by
// configured weights alone sends a relay with less capacity than its share
// more than it can serve (429s from its keys) while another's keys idle.
//
// A backend's first attempts are the attempts its keys take (Attempts:
// what they accept plus the short refusals, which take none of a window)
// less the retries it takes for the others: Envoy retries a refused attempt
// on another host of the priority (retry_host_predicate previous_hosts),
// which takes that host's capacity too. Those are spread over the other
// hosts by their attempts. With equal configured weights the split is the
// capacities'; unequal ones still tilt it.
func capacityWeights(targets []ir.Target, capacity map[string]contract.Capacity) []uint32 {
	w := make([]uint32, len(targets))
	for i, t := range targets {
		w[i] = t.Weight
	}
	if len(capacity) == 0 {
		return w
	}
	for _, prio := range priorities(targets) {
		var idx []int
		var attempts float64
		known := true
		for i, t := range targets {
			if t.Priority != prio {
				continue
			}
			c, ok := capacity[t.Backend]
			if !ok || c.Attempts <= 0 {
				known = false
				break
			}
			idx = append(idx, i)
			attempts += c.Attempts
		}
		if !known || len(idx) < 2 {
			continue
		}
		first := make([]float64, len(idx))
		var sum float64
		for n, i := range idx {
			a := capacity[targets[i].Backend].Attempts
			var in float64 // retries of the others' refusals it takes
			for _, j := range idx {
				if j == i {
					continue
				}
				cj := capacity[targets[j].Backend]
				in += min(cj.Refused, cj.Attempts) * a / (attempts - cj.Attempts)
			}
			// At least a tenth of its attempts: a host that would only
			// take retries still gets some first attempts.
			first[n] = float64(targets[i].Weight) * max(a-in, a/10)
			sum += first[n]
		}
		for n, i := range idx {
			w[i] = uint32(max(1, math.Round(capacityScale*first[n]/sum)))
		}
	}
	return w
}

func priorities(targets []ir.Target) []uint32 {
	var ps []uint32
	for _, t := range targets {
		ps = append(ps, t.Priority)
	}
	slices.Sort(ps)
	return slices.Compact(ps)
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
			Hostname: hostHeader(t.ServerName), // auto_host_rewrite uses it
		}},
		HealthStatus: health,
		Metadata:     md,
	}
}

// hostHeader is the Host a backend's requests carry: its name, an IPv6
// literal in brackets (RFC 9110 uri-host; Envoy's host rewrite sends the
// endpoint's hostname as it is).
func hostHeader(name string) string {
	if ip := net.ParseIP(name); ip != nil && ip.To4() == nil {
		return "[" + name + "]"
	}
	return name
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
