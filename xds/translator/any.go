package translator

import (
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// mustAny packs a message we built ourselves, deterministically (map fields
// sorted) so the same config gives byte-identical resources and versions.
// Marshalling a well-formed generated message cannot fail, so a failure is a
// programming error.
func mustAny(m proto.Message) *anypb.Any {
	a := new(anypb.Any)
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(fmt.Sprintf("translator: packing %T: %v", m, err))
	}
	return a
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func u32(n uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(n) }

// ads is the ConfigSource of every dynamic resource: the ADS stream.
func ads() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

func envoyGRPC(cluster, role string) *corev3.GrpcService {
	g := &corev3.GrpcService{
		TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster}},
	}
	if role != "" {
		g.InitialMetadata = []*corev3.HeaderValue{{Key: contractRoleHeader, Value: role}}
	}
	return g
}
