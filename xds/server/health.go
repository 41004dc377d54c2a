package server

import (
	"context"
	"maps"
	"net"
	"slices"
	"time"
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

// healthLoop pushes EDS-only updates when the health source changes.
func (cp *ControlPlane) healthLoop(ctx context.Context) {
	if cp.health == nil {
		return
	}
	ch := cp.health.Changes()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			start := time.Now()
			if cp.setHealth(unhealthySet(cp.health.BackendHealth())) {
				cp.metrics.healthToPush.Observe(time.Since(start).Seconds())
			}
		}
	}
}

// setHealth records the unhealthy set and pushes EDS if it changed.
func (cp *ControlPlane) setHealth(unhealthy map[string]bool) bool {
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
	if len(changed) == 0 {
		return false
	}
	cp.state.Unhealthy = unhealthy
	cp.log.Info("backend health changed, pushing endpoints",
		"changed", slices.Sorted(maps.Keys(changed)), "unhealthy", slices.Sorted(maps.Keys(unhealthy)))
	return cp.pushEndpointsLocked(changed) == nil
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
		cp.mu.Unlock()
		addrs := cp.resolveAll(ctx, names)
		cp.mu.Lock()
		if !equalAddrs(addrs, cp.state.Addrs) {
			cp.state.Addrs = addrs
			cp.log.Info("backend addresses changed, pushing endpoints")
			_ = cp.pushEndpointsLocked(nil)
		}
		cp.mu.Unlock()
	}
}

// resolveAll looks every name up, each bounded; a failed lookup keeps the
// previous answer (a DNS blip must not empty a locality).
func (cp *ControlPlane) resolveAll(ctx context.Context, names []string) map[string][]string {
	cp.mu.Lock()
	prev := cp.state.Addrs
	cp.mu.Unlock()
	out := make(map[string][]string, len(names))
	for _, n := range names {
		lctx, cancel := context.WithTimeout(ctx, cp.resolveTimeout)
		ips, err := cp.resolver.LookupHost(lctx, n)
		cancel()
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

func equalAddrs(a, b map[string][]string) bool {
	return maps.EqualFunc(a, b, slices.Equal[[]string])
}
