package bootstrap

import (
	"encoding/json"
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/xds/translator"
)

// MeshSnippet is what to paste into an existing Envoy (one that has its own
// control plane, so it cannot take our ADS): the HTTP filters (before your
// router), the route table by RDS from swarmgate, and static clusters — the
// pools get their endpoints (health, priorities) by EDS from swarmgate over a
// plain gRPC config source, and swarmgate's own services. Nodes whose
// cluster is not one of swarmgate's node groups get the gateway snapshot, so
// EDS and RDS answer this Envoy whatever its node cluster. Regenerate the
// snippet when models change (clusters are static here).
func MeshSnippet(cfg *config.Config) ([]byte, error) {
	res, err := translator.Translate(cfg)
	if err != nil {
		return nil, err
	}
	xds, err := translator.ServiceCluster(contract.ClusterXDS, cfg.Envoy.XDSAddress)
	if err != nil {
		return nil, fmt.Errorf("envoy.xds_address %q: %w", cfg.Envoy.XDSAddress, err)
	}
	translator.SecureServiceCluster(xds, &cfg.Security, config.ListenerXDS)
	src := &corev3.ConfigSource{
		ResourceApiVersion: corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
			ApiType:             corev3.ApiConfigSource_GRPC,
			TransportApiVersion: corev3.ApiVersion_V3,
			GrpcServices: []*corev3.GrpcService{{
				TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: contract.ClusterXDS}},
			}},
		}},
	}
	var clusters []*clusterv3.Cluster
	for _, c := range res.Clusters {
		c = proto.Clone(c).(*clusterv3.Cluster)
		if c.EdsClusterConfig != nil {
			c.EdsClusterConfig.EdsConfig = src
		}
		clusters = append(clusters, c)
	}
	clusters = append(clusters, xds)
	hcm := translator.HTTPConnectionManager(res.IR)
	if v := cfg.Security.FleetSecret.Value(); v != "" {
		if err := translator.HCMFleetSecret(hcm, v); err != nil {
			return nil, err
		}
	}
	rds := &hcmv3.Rds{ConfigSource: src, RouteConfigName: translator.RouteName}
	for _, c := range clusters {
		if err := translator.Validate(c); err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
		}
	}
	if err := translator.Validate(rds); err != nil {
		return nil, err
	}
	doc := map[string]any{}
	var filters []any
	for _, f := range hcm.HttpFilters {
		v, err := toValue(f)
		if err != nil {
			return nil, err
		}
		filters = append(filters, v)
	}
	doc["http_filters"] = filters
	if doc["rds"], err = toValue(rds); err != nil {
		return nil, err
	}
	if doc["local_reply_config"], err = toValue(hcm.LocalReplyConfig); err != nil {
		return nil, err
	}
	var cs []any
	for _, c := range clusters {
		v, err := toValue(c)
		if err != nil {
			return nil, err
		}
		cs = append(cs, v)
	}
	doc["clusters"] = cs
	return yaml.Marshal(doc)
}

func toValue(m proto.Message) (any, error) {
	j, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var v any
	return v, json.Unmarshal(j, &v)
}
