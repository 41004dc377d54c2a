// Package bootstrap generates Envoy bootstrap files that point Envoy at the
// swarmgate control plane (ADS), and the existing-mesh snippet.
package bootstrap

import (
	"encoding/json"
	"fmt"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	overloadv3 "github.com/envoyproxy/go-control-plane/envoy/config/overload/v3"
	downstreamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/downstream_connections/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sigs.k8s.io/yaml"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/xds/translator"
)

// Options tune the bootstrap.
type Options struct {
	// AdminAddress is Envoy's admin listener (host:port); keep it on
	// loopback. Default 127.0.0.1:9901.
	AdminAddress string
	// SotW selects State-of-the-World ADS; the default is Delta (incremental)
	// xDS, which sends only changed clusters and endpoints.
	SotW bool
}

// maxDownstreamConnections is the process-wide cap on client connections.
const maxDownstreamConnections = 50000

// DefaultAdminAddress is Envoy's admin listener unless Options say otherwise.
const DefaultAdminAddress = "127.0.0.1:9901"

// Bootstrap is the YAML bootstrap for an Envoy node of cfg's gateway fleet
// (`swarmgate bootstrap`), with default Options.
func Bootstrap(cfg *config.Config, nodeID string) ([]byte, error) {
	b, err := Build(cfg, nodeID, Options{})
	if err != nil {
		return nil, err
	}
	return Marshal(b)
}

// Build is the bootstrap message: node (id, cluster = envoy.node_cluster,
// which selects the snapshot), admin on loopback, ADS over gRPC to the
// control plane through the static swarmgate_xds cluster, LDS and CDS from
// ADS (RDS and EDS follow from them).
// https://www.envoyproxy.io/docs/envoy/latest/configuration/overview/examples#fully-dynamic
func Build(cfg *config.Config, nodeID string, opts Options) (*bootstrapv3.Bootstrap, error) {
	if nodeID == "" {
		return nil, fmt.Errorf("bootstrap: node id is required")
	}
	if opts.AdminAddress == "" {
		opts.AdminAddress = DefaultAdminAddress
	}
	xds, err := translator.ServiceCluster(contract.ClusterXDS, cfg.Envoy.XDSAddress)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: envoy.xds_address %q: %w", cfg.Envoy.XDSAddress, err)
	}
	translator.SecureServiceCluster(xds, &cfg.Security, config.ListenerXDS)
	xds.UpstreamConnectionOptions = &clusterv3.UpstreamConnectionOptions{
		TcpKeepalive: &corev3.TcpKeepalive{KeepaliveTime: wrapperspb.UInt32(30), KeepaliveInterval: wrapperspb.UInt32(10)},
	}
	admin, err := translator.SocketAddress(opts.AdminAddress)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: admin address %q: %w", opts.AdminAddress, err)
	}
	apiType := corev3.ApiConfigSource_DELTA_GRPC
	if opts.SotW {
		apiType = corev3.ApiConfigSource_GRPC
	}
	adsSource := &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
	b := &bootstrapv3.Bootstrap{
		Node:  &corev3.Node{Id: nodeID, Cluster: cfg.Envoy.NodeCluster},
		Admin: &bootstrapv3.Admin{Address: admin},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:                   apiType,
				TransportApiVersion:       corev3.ApiVersion_V3,
				SetNodeOnFirstMessageOnly: true,
				GrpcServices: []*corev3.GrpcService{{
					TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: contract.ClusterXDS}},
				}},
			},
			LdsConfig: adsSource,
			CdsConfig: adsSource,
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{xds}},
		// A global cap on downstream connections (Envoy warns without one):
		// an agent swarm opens many, a runaway one must not exhaust fds.
		// https://www.envoyproxy.io/docs/envoy/latest/configuration/operations/overload_manager/overload_manager
		OverloadManager: &overloadv3.OverloadManager{
			ResourceMonitors: []*overloadv3.ResourceMonitor{{
				Name: "envoy.resource_monitors.global_downstream_max_connections",
				ConfigType: &overloadv3.ResourceMonitor_TypedConfig{TypedConfig: mustAny(&downstreamv3.DownstreamConnectionsConfig{
					MaxActiveDownstreamConnections: maxDownstreamConnections,
				})},
			}},
		},
	}
	if err := translator.Validate(b); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return b, nil
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("bootstrap: packing %T: %v", m, err))
	}
	return a
}

// Marshal renders a message as YAML (protojson field names, as Envoy reads
// them with --config-path *.yaml).
func Marshal(m proto.Message) ([]byte, error) {
	j, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(j, &v); err != nil {
		return nil, err
	}
	return yaml.Marshal(v)
}
