package gatewayconfig

import (
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	pb "github.com/swarmgate/swarmgate/protos/swarmgate/v1"
)

// TypeURL is the xDS type URL of swarmgate.v1.GatewayConfig,
// "type.googleapis.com/swarmgate.v1.GatewayConfig".
var TypeURL = resource.APITypePrefix + string((&pb.GatewayConfig{}).ProtoReflect().Descriptor().FullName())
