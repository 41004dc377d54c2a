package service

import (
	"strconv"
	"strings"
	"sync"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/ratelimit/src/stats"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// applyQuotas turns the quota entry of each sub-key descriptor
// ([subkey=<id>, limit=rpm|rpd|tpm, quota=<n>]) into the descriptor's limit
// override and drops the entry, before the library sees the request.
//
// The library honours RateLimitDescriptor.limit without looking at its
// config (rateLimitConfigImpl.GetLimit returns a limit built from the
// override whenever the domain exists), so a sub-key's limits need no
// config entry, and its Redis counter is named by [subkey, limit] alone: a
// changed limit keeps counting the same window. Envoy cannot send the
// override itself from the filter-level rate_limits before 1.39 (1.38
// rejects their `limit` field); it sends the limit as an entry read from
// ext_proc's dynamic metadata instead, which every release supports.
//
// A descriptor that already carries an override keeps it. A quota that is
// not a positive 32-bit number is dropped without an override: the
// descriptor then meets the config, which has no sub-key entry, and does
// not limit (ext_proc never sends one; zero means unlimited and is not
// sent).
func applyQuotas(ds []*rlcommon.RateLimitDescriptor) {
	for _, d := range ds {
		es := d.GetEntries()
		if len(es) < 3 || es[0].GetKey() != contract.DescSubkey || es[len(es)-1].GetKey() != contract.DescQuota {
			continue
		}
		n, err := strconv.ParseUint(es[len(es)-1].GetValue(), 10, 32)
		d.Entries = es[:len(es)-1]
		if err != nil || n == 0 || d.Limit != nil {
			continue
		}
		unit := typev3.RateLimitUnit_MINUTE
		if es[len(es)-2].GetKey() == contract.DescLimit && es[len(es)-2].GetValue() == contract.LimitRPD {
			unit = typev3.RateLimitUnit_DAY
		}
		d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(n), Unit: unit}
	}
}

// subkeyStats gives every sub-key one set of counters per limit kind.
// The library builds the stats of an overridden descriptor per call,
// named by all its entries (config_impl.go GetLimit, descriptorKey), and
// the stats store keeps each name forever: 6 counters per sub-key and
// limit, growing with every key ever seen. Counter names only label
// metrics; the Redis counters are named by the entries themselves.
type subkeyStats struct {
	stats.Manager
	prefix string   // "<domain>.subkey_"
	kinds  sync.Map // "<domain>.subkey.limit_<kind>" -> stats.RateLimitStats
}

func newSubkeyStats(m stats.Manager, domain string) *subkeyStats {
	return &subkeyStats{Manager: m, prefix: domain + "." + contract.DescSubkey + "_"}
}

// NewStats maps "<domain>.subkey_<id>.limit_<kind>" to the shared
// "<domain>.subkey.limit_<kind>", built once (the library asks per call).
func (m *subkeyStats) NewStats(key string) stats.RateLimitStats {
	rest, ok := strings.CutPrefix(key, m.prefix)
	i := strings.LastIndexByte(rest, '.')
	if !ok || i < 0 {
		return m.Manager.NewStats(key)
	}
	kind := rest[i:]
	if st, ok := m.kinds.Load(kind); ok {
		return st.(stats.RateLimitStats)
	}
	st := m.Manager.NewStats(m.prefix[:len(m.prefix)-1] + kind)
	m.kinds.Store(kind, st)
	return st
}
