package server

import (
	"context"
	"maps"
	"math"
	"net"
	"slices"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// HealthSource reports which backends still have a usable upstream key. The
// key pools implement it; the control plane turns it into EDS health so
// Envoy fails over by priority when every key of a backend is open (a local
// reply from the upstream filter would not be retried).
type HealthSource interface {
	// BackendHealth maps backend name to "has a usable key". Backends that
	// are absent are healthy.
	BackendHealth() map[string]bool
	// Changes signals (coalesced) that BackendHealth may have changed.
	Changes() <-chan struct{}
}

// CapacitySource is a HealthSource that also reports each backend's
// learned capacity (absent: unknown), which weights
// the pools' localities (translator.EndpointState.Capacity). Changes
// signals its changes too.
type CapacitySource interface {
	BackendCapacity() map[string]contract.Capacity
}

// Resolver looks up backend host names: EDS endpoints must be IP addresses.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

var _ Resolver = (*net.Resolver)(nil)

// unhealthySet turns a BackendHealth answer into the set of unhealthy names.
func unhealthySet(h map[string]bool) map[string]bool {
	out := map[string]bool{}
	for name, ok := range h {
		if !ok {
			out[name] = true
		}
	}
	return out
}

// healthLoop pushes EDS-only updates when the health source changes:
// health at once, new capacity weights at most every capacityEvery (a
// refusing key's capacity moves with its refused share; every push goes to
// the whole fleet).
func (cp *ControlPlane) healthLoop(ctx context.Context) {
	if cp.health == nil {
		return
	}
	ch := cp.health.Changes()
	var capacityAt time.Time // the last push of new weights
	var later <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-later:
			later = nil
		}
		start := time.Now()
		unhealthy := unhealthySet(cp.health.BackendHealth())
		var capacity map[string]contract.Capacity
		check := start.Sub(capacityAt) >= cp.capacityEvery
		if check {
			capacity = cp.capacity()
		} else if later == nil {
			later = time.After(cp.capacityEvery - start.Sub(capacityAt))
		}
		pushed, moved := cp.setHealth(unhealthy, capacity, check)
		if moved {
			capacityAt = start
		}
		if pushed {
			cp.metrics.healthToPush.Observe(time.Since(start).Seconds())
		}
	}
}

// capacity is the health source's capacity report (nil without one).
func (cp *ControlPlane) capacity() map[string]contract.Capacity {
	if c, ok := cp.health.(CapacitySource); ok {
		return c.BackendCapacity()
	}
	return nil
}

// setHealth records the unhealthy set and, when checkCapacity, the
// backends' capacity, and pushes EDS for the pools of backends whose
// health changed or whose capacity moved by more than capacityStep.
// moved: some capacity did.
func (cp *ControlPlane) setHealth(unhealthy map[string]bool, capacity map[string]contract.Capacity, checkCapacity bool) (pushed, capacityChanged bool) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	changed := map[string]bool{}
	for b := range unhealthy {
		if !cp.state.Unhealthy[b] {
			changed[b] = true
		}
	}
	for b := range cp.state.Unhealthy {
		if !unhealthy[b] {
			changed[b] = true
		}
	}
	healthChanged := len(changed) > 0
	var moved []string
	if checkCapacity {
		moved = capacityMoved(cp.state.Capacity, capacity)
	}
	for _, b := range moved {
		changed[b] = true
	}
	if len(changed) == 0 {
		return false, false
	}
	cp.state.Unhealthy = unhealthy
	if len(moved) > 0 {
		// Only the moved backends take their new figure: the state stays
		// what the pushed assignments were built from.
		next := maps.Clone(cp.state.Capacity)
		if next == nil {
			next = map[string]contract.Capacity{}
		}
		for _, b := range moved {
			if c, ok := capacity[b]; ok {
				next[b] = c
			} else {
				delete(next, b)
			}
		}
		cp.metrics.setCapacity(cp.state.Capacity, next)
		cp.state.Capacity = next
		// Debug: it may change every CapacityEvery; the gauge
		// swarmgate_xds_backend_capacity_per_minute shows it.
		cp.log.Debug("backend capacity changed, pushing endpoint weights", "changed", moved)
	}
	if healthChanged {
		cp.log.Info("backend health changed, pushing endpoints",
			"changed", slices.Sorted(maps.Keys(changed)), "unhealthy", slices.Sorted(maps.Keys(unhealthy)))
	}
	return cp.pushEndpointsLocked(changed) == nil, len(moved) > 0
}

// capacityStep is the least relative change of a backend's capacity that
// pushes new weights: a learned window's figure may move a little from
// answer to answer, and each push goes to the whole fleet.
const capacityStep = 0.1

// capacityMoved lists (sorted) the backends whose capacity appeared,
// disappeared or moved by more than capacityStep from was to now.
func capacityMoved(was, now map[string]contract.Capacity) []string {
	var out []string
	for b, c := range now {
		old, ok := was[b]
		if !ok || math.Abs(c.Attempts-old.Attempts) > capacityStep*old.Attempts ||
			math.Abs(c.Refused-old.Refused) > capacityStep*old.Attempts {
			out = append(out, b)
		}
	}
	for b := range was {
		if _, ok := now[b]; !ok {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out
}

// resolveLoop re-resolves backend names and pushes EDS when answers change.
func (cp *ControlPlane) resolveLoop(ctx context.Context) {
	t := time.NewTicker(cp.resolveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cp.mu.Lock()
		var names []string
		if cp.res != nil {
			names = cp.dnsNames
		}
		family := cp.dnsFamily
		cp.mu.Unlock()
		addrs := cp.resolveAll(ctx, names, family)
		cp.mu.Lock()
		if cp.dnsFamily != family {
			// A SetConfig changed the family during the pass and picked
			// every name again: the pass's answers are of the old one.
			cp.mu.Unlock()
			continue
		}
		// A SetConfig during the pass may have changed the names and
		// resolved the new ones: the pass's answers go into that state.
		addrs = mergeAddrs(cp.dnsNames, addrs, cp.state.Addrs)
		if !equalAddrs(addrs, cp.state.Addrs) {
			cp.state.Addrs = addrs
			cp.log.Info("backend addresses changed, pushing endpoints")
			_ = cp.pushEndpointsLocked(nil)
		}
		cp.mu.Unlock()
	}
}

// resolveAll looks every name up, each bounded, and keeps the addresses of
// family (config.PickFamily); a failed lookup, or one with none of them,
// keeps the previous answer (a DNS blip must not empty a locality).
func (cp *ControlPlane) resolveAll(ctx context.Context, names []string, family string) map[string][]string {
	cp.mu.Lock()
	prev := cp.state.Addrs
	cp.mu.Unlock()
	out := make(map[string][]string, len(names))
	for _, n := range names {
		lctx, cancel := context.WithTimeout(ctx, cp.resolveTimeout)
		ips, err := cp.resolver.LookupHost(lctx, n)
		cancel()
		if err == nil && len(ips) > 0 {
			if ips = config.PickFamily(family, ips); len(ips) == 0 {
				// An answer, none of the family: no address, not the
				// previous answer (another family's, say).
				cp.log.Warn("backend host has no address of envoy.dns_lookup_family", "host", n, "family", family)
				out[n] = []string{}
				continue
			}
		}
		if err != nil || len(ips) == 0 {
			cp.metrics.resolveFailures.Inc()
			cp.log.Warn("resolving backend host failed", "host", n, "err", err)
			if old, ok := prev[n]; ok {
				out[n] = old
			}
			continue
		}
		slices.Sort(ips)
		out[n] = slices.Compact(ips)
	}
	return out
}

// mergeAddrs is the addresses of names: a pass's answer where it has one,
// else the current one (a name the pass did not know of keeps what
// SetConfig resolved; a name no longer configured is dropped).
func mergeAddrs(names []string, pass, current map[string][]string) map[string][]string {
	out := make(map[string][]string, len(names))
	for _, n := range names {
		if a, ok := pass[n]; ok {
			out[n] = a
		} else if a, ok := current[n]; ok {
			out[n] = a
		}
	}
	return out
}

func equalAddrs(a, b map[string][]string) bool {
	return maps.EqualFunc(a, b, slices.Equal[[]string])
}
