package translator

import (
	"slices"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// RateLimitConfig is the envoyproxy/ratelimit configuration (served over xDS
// as ratelimit.config.ratelimit.v3.RateLimitConfig) that matches the
// descriptors the Envoy rate-limit filter sends (see rateLimitActions) and
// the per-upstream-key descriptors ext_proc checks by calling the service
// directly.
//
// Tree (ratelimit matches descriptor entries in order, leaf carries the limit):
//
//	tenant=<name> ─ limit=rpm              per MINUTE
//	              ─ limit=rpd              per DAY
//	              ─ limit=tpm              per MINUTE (token_limits: ratelimit)
//	              ─ model=<alias> ─ limit=rpm | limit=tpm
//	key=<key id>  ─ limit=rpm | limit=tpm  per MINUTE
//
// Zero limits mean unlimited and produce no entry: the service answers OK for
// descriptors it does not know. Output is sorted so the same config always
// yields the same resource (and version hash).
// https://github.com/envoyproxy/ratelimit#configuration
func RateLimitConfig(cfg *config.Config) *rlsconf.RateLimitConfig {
	tokens := cfg.Accounting.TokenLimits == TokenLimitsRateLimit
	out := &rlsconf.RateLimitConfig{Name: cfg.Envoy.RateLimitDomain, Domain: cfg.Envoy.RateLimitDomain}

	tenants := make([]*config.Tenant, 0, len(cfg.Tenants))
	for i := range cfg.Tenants {
		tenants = append(tenants, &cfg.Tenants[i])
	}
	slices.SortFunc(tenants, func(a, b *config.Tenant) int { return cmpString(a.Name, b.Name) })
	for _, t := range tenants {
		node := &rlsconf.RateLimitDescriptor{Key: contract.DescTenant, Value: t.Name}
		node.Descriptors = limitLeaves(t.Limits, true, tokens)
		models := make([]string, 0, len(t.ModelLimits))
		for m := range t.ModelLimits {
			models = append(models, m)
		}
		slices.Sort(models)
		for _, m := range models {
			leaves := limitLeaves(t.ModelLimits[m], false, tokens)
			if len(leaves) == 0 {
				continue
			}
			node.Descriptors = append(node.Descriptors, &rlsconf.RateLimitDescriptor{
				Key: contract.DescModel, Value: m, Descriptors: leaves,
			})
		}
		if len(node.Descriptors) > 0 {
			out.Descriptors = append(out.Descriptors, node)
		}
	}

	type keyLimit struct {
		id       string
		rpm, tpm int
	}
	var keys []keyLimit
	for i := range cfg.Backends {
		for _, k := range cfg.Backends[i].Keys {
			if k.RPM > 0 || k.TPM > 0 {
				keys = append(keys, keyLimit{k.ID, k.RPM, k.TPM})
			}
		}
	}
	slices.SortFunc(keys, func(a, b keyLimit) int { return cmpString(a.id, b.id) })
	for _, k := range keys {
		node := &rlsconf.RateLimitDescriptor{Key: contract.DescKey, Value: k.id}
		if k.rpm > 0 {
			node.Descriptors = append(node.Descriptors, leaf(contract.LimitRPM, k.rpm, rlsconf.RateLimitUnit_MINUTE))
		}
		if k.tpm > 0 {
			node.Descriptors = append(node.Descriptors, leaf(contract.LimitTPM, k.tpm, rlsconf.RateLimitUnit_MINUTE))
		}
		out.Descriptors = append(out.Descriptors, node)
	}
	return out
}

// TokenLimitsRateLimit is the accounting.token_limits value that makes the
// Envoy rate-limit filter enforce TPM.
const TokenLimitsRateLimit = "ratelimit"

func limitLeaves(l config.Limits, withRPD, tokens bool) []*rlsconf.RateLimitDescriptor {
	var out []*rlsconf.RateLimitDescriptor
	if l.RPM > 0 {
		out = append(out, leaf(contract.LimitRPM, l.RPM, rlsconf.RateLimitUnit_MINUTE))
	}
	if withRPD && l.RPD > 0 {
		out = append(out, leaf(contract.LimitRPD, l.RPD, rlsconf.RateLimitUnit_DAY))
	}
	if tokens && l.TPM > 0 {
		out = append(out, leaf(contract.LimitTPM, l.TPM, rlsconf.RateLimitUnit_MINUTE))
	}
	return out
}

func leaf(kind string, n int, unit rlsconf.RateLimitUnit) *rlsconf.RateLimitDescriptor {
	return &rlsconf.RateLimitDescriptor{
		Key: contract.DescLimit, Value: kind,
		RateLimit: &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: clampU32(n)},
	}
}

func clampU32(n int) uint32 {
	switch {
	case n < 0:
		return 0
	case uint64(n) > 1<<32-1:
		return 1<<32 - 1
	}
	return uint32(n)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
