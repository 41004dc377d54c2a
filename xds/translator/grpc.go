package translator

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// GRPCListener is an api_listener for proxyless gRPC clients (grpc-go's xDS
// client): target xds:///swarmgate resolves through the same route table as
// Envoy; the pool is chosen by the x-swarmgate-pool request metadata.
// gRPC ignores the ext_proc and rate-limit filters, so it gets the router
// only.
// https://github.com/grpc/proposal/blob/master/A27-xds-global-load-balancing.md
func GRPCListener() *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: StatPrefix,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource: ads(), RouteConfigName: RouteName,
		}},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: FilterRouter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}},
		},
	}
	return &listenerv3.Listener{Name: ListenerName, ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)}}
}

// GRPCClusters are the pool clusters a gRPC client can use: grpc-go rejects
// transport_socket_matches, so pools with an HTTPS target are left out.
func GRPCClusters(r *Resources) []*clusterv3.Cluster {
	var out []*clusterv3.Cluster
	for i, c := range r.Clusters {
		if i >= len(r.IR.Pools) {
			break // service clusters
		}
		if len(c.TransportSocketMatches) == 0 {
			out = append(out, c)
		}
	}
	return out
}
