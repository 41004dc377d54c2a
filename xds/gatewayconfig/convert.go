// Package gatewayconfig carries the validated config model to ext_proc
// replicas over xDS as swarmgate.v1.GatewayConfig: the config itself, in its
// JSON form (which YAML parsers read), so a replica validates exactly what a file would give
// it and nothing is described twice.
package gatewayconfig

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/swarmgate/swarmgate/internal/config"
	pb "github.com/swarmgate/swarmgate/protos/swarmgate/v1"
)

// ResourceName is the name of the one GatewayConfig resource in a snapshot.
const ResourceName = "gateway"

// Format is the config encoding this build writes and reads: the JSON of
// config.Config (secrets as references, virtual keys as hashes).
const Format = 1

// FromConfig puts cfg into the wire form. Secrets are written as their
// references and virtual keys as hashes (config's own marshalling), so no
// credential value is ever in the result. Security and admin are local to
// each process and left out. The same config always gives the same bytes,
// so control-plane replicas agree on the snapshot version.
func FromConfig(cfg *config.Config) (*pb.GatewayConfig, error) {
	sent := *cfg
	sent.Security = config.Security{}
	sent.Admin = config.Admin{}
	sent.Tenants = hashesOnly(cfg.Tenants)
	// JSON, which config.Parse reads as YAML: the config's JSON form
	// (the same field names, secrets as references) is orders of magnitude
	// cheaper to write than YAML on a large config.
	b, err := json.Marshal(&sent)
	if err != nil {
		return nil, fmt.Errorf("gateway config: encoding: %w", err)
	}
	return &pb.GatewayConfig{Name: ResourceName, Source: cfg.Source, Format: Format, Config: b}, nil
}

// hashesOnly returns tenants with every virtual key whose hash was computed
// from its secret sent as that hash alone: a replica parses the pair as
// "hash or secret, not both" and would refuse every update, and it needs
// only the hash. tenants itself is shared, not written.
func hashesOnly(tenants []config.Tenant) []config.Tenant {
	out := tenants
	for i := range tenants {
		var keys []config.VirtualKey
		for j := range tenants[i].Keys {
			if !tenants[i].Keys[j].HashFromSecret() {
				continue
			}
			if keys == nil {
				keys = slices.Clone(tenants[i].Keys)
			}
			keys[j].Secret = config.Secret{}
		}
		if keys == nil {
			continue
		}
		if &out[0] == &tenants[0] {
			out = slices.Clone(tenants)
		}
		out[i].Keys = keys
	}
	return out
}

// ToConfig rebuilds a validated config from the wire form with config.Parse:
// the same validation as a file, secret references resolved locally (opts),
// the lookup index built. The config carries every field explicitly
// (FromConfig writes a defaulted config), so a zero is a zero (a drained
// weight stays drained).
func ToConfig(gc *pb.GatewayConfig, opts config.Options) (*config.Config, error) {
	if gc.GetFormat() != Format {
		return nil, fmt.Errorf("gateway config from xDS: format %d, this build reads %d (upgrade the replica)", gc.GetFormat(), Format)
	}
	source := gc.GetSource()
	if source == "" {
		source = "xds:" + ResourceName
	}
	opts.Received = true
	cfg, err := config.Parse(gc.GetConfig(), source, opts)
	if err != nil {
		return nil, fmt.Errorf("gateway config from xDS: %w", err)
	}
	return cfg, nil
}
