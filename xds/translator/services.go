package translator

import (
	"net"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// serviceConnectTimeout: swarmgate's services run next to Envoy.
const serviceConnectTimeout = time.Second

// ServiceMaxRequests is the circuit-breaker threshold (requests, pending
// requests, connections) of the clusters to swarmgate's own gRPC
// services. Envoy's default is 1,024 requests per cluster
// (circuit_breaker.proto), counted per gRPC stream (conn_pool_base.cc
// attachStreamToClient; overflow: upstream_rq_active_overflow). Every
// in-flight client request holds a router-level ext_proc stream for its
// whole life and one more per upstream attempt, so past ~1,000 concurrent
// requests new streams failed (500, or passed unprocessed with
// failure_mode_allow) — measured on Envoy 1.38.3 and 1.40.0: 1,365 to 1,567 of 2,000 held
// streams refused. The bound is twice the downstream connections the
// bootstrap admits (bootstrap.maxDownstreamConnections, 50,000): two
// streams per request; the overload manager, not this breaker, is the
// cap.
const ServiceMaxRequests = 100_000

// ServiceCluster is a gRPC (HTTP/2) cluster to one of swarmgate's services:
// STATIC for an IP address, STRICT_DNS for a name.
func ServiceCluster(name, addr string) (*clusterv3.Cluster, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, err
	}
	typ := clusterv3.Cluster_STRICT_DNS
	if net.ParseIP(host) != nil {
		typ = clusterv3.Cluster_STATIC
	}
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: typ},
		ConnectTimeout:       dur(serviceConnectTimeout),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		CircuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			Priority:           corev3.RoutingPriority_DEFAULT,
			MaxConnections:     u32(ServiceMaxRequests),
			MaxPendingRequests: u32(ServiceMaxRequests),
			MaxRequests:        u32(ServiceMaxRequests),
		}}},
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			HTTPOptionsKey: mustAny(&httpv3.HttpProtocolOptions{
				UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
					ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
						ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
							Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
						},
					},
				},
			}),
		},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{
				LbEndpoints: []*endpointv3.LbEndpoint{{
					HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
						Address: socketAddress(host, uint32(port)),
					}},
				}},
			}},
		},
	}, nil
}

// SocketAddress parses host:port into an Envoy address.
func SocketAddress(addr string) (*corev3.Address, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, err
	}
	return socketAddress(host, uint32(port)), nil
}
