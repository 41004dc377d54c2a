package translator

import "github.com/swarmgate/swarmgate/internal/contract"

// Names of the generated resources. Clusters of pools are
// contract.Pool.Cluster (internal/routing plans them); the service clusters
// are contract.Cluster*.
const (
	ListenerName    = "swarmgate"         // the gateway listener (LDS)
	RouteName       = "swarmgate"         // its route configuration (RDS)
	VirtualHostName = "swarmgate"         // the one virtual host, domain "*"
	StatPrefix      = "swarmgate"         // HCM stats
	NoRouteName     = "swarmgate_no_pool" // the catch-all 404 route

	// Extension names as Envoy registers them.
	FilterExtProc   = "envoy.filters.http.ext_proc"
	FilterRateLimit = "envoy.filters.http.ratelimit"
	FilterRouter    = "envoy.filters.http.router"
	FilterCodec     = "envoy.filters.http.upstream_codec"
	HCMName         = "envoy.filters.network.http_connection_manager"
	HTTPOptionsKey  = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

	// TransportSocketMatchKey is the endpoint metadata (under
	// envoy.transport_socket_match) naming the TLS context of a backend.
	TransportSocketMatchKey = "swarmgate_backend"
)

const contractRoleHeader = contract.GRPCRoleHeader
