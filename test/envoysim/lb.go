package envoysim

import (
	"slices"
)

// Envoy's default overprovisioning factor, in percent
// (ClusterLoadAssignment.policy.overprovisioning_factor; kDefaultOverProvisioningFactor = 140).
const defaultOverprovisioning = 140

// Envoy's default healthy_panic_threshold, in percent
// (Cluster.CommonLbConfig.healthy_panic_threshold).
const defaultPanicThreshold = 50.0

// priorityState is the load balancer's view of one cluster's priority set
// (source/extensions/load_balancing_policies/common/load_balancer_impl.cc,
// LoadBalancerBase, v1.38.0). Priorities are dense from 0 to the highest
// one, as Envoy's PrioritySet: a missing level is an empty host set.
type priorityState struct {
	hosts  [][]int // endpoint indexes per priority
	health []int   // per-priority health, 0..100
	load   []int   // per-priority healthy load, sums to 100
	panic  []bool
}

func (c *Cluster) overprovisioning() int {
	if c.OverprovisioningFactor > 0 {
		return c.OverprovisioningFactor
	}
	return defaultOverprovisioning
}

func (c *Cluster) panicThreshold() float64 {
	if c.HealthyPanicThreshold != nil {
		return min(*c.HealthyPanicThreshold, 100)
	}
	return defaultPanicThreshold
}

// computePriorities is recalculatePerPriorityState + recalculatePerPriorityPanic
// (load_balancer_impl.cc, v1.38.0): health = min(100, factor × healthy /
// hosts) per priority (weighted_priority_health off: host counts); load goes
// to priorities in order, each taking health×100/normalized total (total
// capped at 100), the rounding remainder to the first available priority. A
// priority is in panic when its healthy percentage is below the threshold,
// unless the normalized total is 100. All in panic: load by host count
// (recalculateLoadInTotalPanic). Threshold 0 and nothing available: 100 %
// to priority 0, where no host will be found. Degraded hosts are not
// modelled (EDS DEGRADED is rejected by FromXDS).
func computePriorities(c *Cluster) priorityState {
	maxP := -1
	for _, e := range c.Endpoints {
		maxP = max(maxP, e.Priority)
	}
	n := maxP + 1
	ps := priorityState{hosts: make([][]int, n), health: make([]int, n), load: make([]int, n), panic: make([]bool, n)}
	for i, e := range c.Endpoints {
		ps.hosts[e.Priority] = append(ps.hosts[e.Priority], i)
	}
	for p, hs := range ps.hosts {
		if len(hs) == 0 {
			continue
		}
		ps.health[p] = min(100, c.overprovisioning()*healthyCount(c, hs)/len(hs))
	}
	total := normalizedAvailability(ps.health)
	if total > 0 {
		ps.load = distribute(ps.health, total)
	}
	threshold := c.panicThreshold()
	if threshold == 0 && total == 0 {
		if n > 0 {
			ps.load[0] = 100
		}
		return ps
	}
	allPanic := n > 0
	for p, hs := range ps.hosts {
		healthyPct := 0.0
		if len(hs) > 0 {
			healthyPct = 100 * float64(healthyCount(c, hs)) / float64(len(hs))
		}
		ps.panic[p] = total != 100 && healthyPct < threshold
		allPanic = allPanic && ps.panic[p]
	}
	if allPanic {
		ps.load = make([]int, n)
		all := len(c.Endpoints)
		left, first := 100, -1
		for p, hs := range ps.hosts {
			if first < 0 && len(hs) > 0 {
				first = p
			}
			if all > 0 {
				ps.load[p] = 100 * len(hs) / all
				left -= ps.load[p]
			}
		}
		if first < 0 {
			first = 0
		}
		if n > 0 {
			ps.load[first] += left
		}
	}
	return ps
}

func healthyCount(c *Cluster, idx []int) int {
	n := 0
	for _, i := range idx {
		if !c.Endpoints[i].Unhealthy {
			n++
		}
	}
	return n
}

func normalizedAvailability(health []int) int {
	t := 0
	for _, h := range health {
		t += h
	}
	return min(t, 100)
}

// distribute is distributeLoad plus the remainder rule of
// recalculatePerPriorityState (load_balancer_impl.cc, v1.38.0).
func distribute(avail []int, total int) []int {
	load := make([]int, len(avail))
	left, first := 100, -1
	for p, a := range avail {
		if first < 0 && a > 0 {
			first = p
		}
		load[p] = min(left, a*100/total)
		left -= load[p]
	}
	if left > 0 && first >= 0 {
		load[first] += left
	}
	return load
}

// previousPrioritiesLoad is PreviousPrioritiesRetryPriority::determinePriorityLoad
// with update_frequency 1 (source/extensions/retry/priority/previous_priorities/previous_priorities.cc,
// v1.38.0): on a retry, priorities of attempted hosts are excluded and the
// load is spread over the health of the rest. When nothing is left, the
// original load is used (Envoy "resets" the exclusions with a loop over
// copies, which leaves them set, so it always ends on the original load).
func previousPrioritiesLoad(ps priorityState, attempted []int, freq int) []int {
	if freq <= 0 {
		freq = 1
	}
	if len(attempted) < freq {
		return ps.load
	}
	avail := slices.Clone(ps.health)
	for _, p := range attempted {
		if p < len(avail) {
			avail[p] = 0
		}
	}
	total := normalizedAvailability(avail)
	if total == 0 {
		return ps.load
	}
	return distribute(avail, total)
}

// choosePriority is LoadBalancerBase::choosePriority: hash%100+1 against the
// cumulative loads.
func choosePriority(load []int, r uint64) int {
	h := int(r%100) + 1
	acc := 0
	for p, l := range load {
		acc += l
		if h <= acc {
			return p
		}
	}
	return 0
}

// chooseHost is ZoneAwareLoadBalancerBase::chooseHost (load_balancer_impl.cc,
// v1.38.0) as the router drives it: up to hostSelectionRetryCount()+1 picks
// (the router says 1 on a first try, host_selection_retry_max_attempts on a
// retry — router.h Filter::hostSelectionRetryCount, default 1), each picking
// a priority from the (retry-adjusted) load and a host in it, until the
// retry host predicate (previous_hosts) accepts one; the last pick is used
// otherwise. In a priority in panic every host is a candidate, healthy or
// not (hostSourceToUse, AllHosts); outside panic only healthy hosts, and
// none means no host: Envoy's 503 "no healthy upstream".
//
// Simplified: Envoy's ROUND_ROBIN with locality weighting is modelled as a
// weighted random choice among the candidates (weight = locality ×
// endpoint weight).
func (s *Sim) chooseHost(c *Cluster, rp *RetryPolicy, attempted []*Endpoint, retry bool) *Endpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := computePriorities(c)
	if len(ps.load) == 0 {
		return nil
	}
	load := ps.load
	if retry && rp.PreviousPriorities {
		var prios []int
		for _, e := range attempted {
			prios = append(prios, e.Priority)
		}
		load = previousPrioritiesLoad(ps, prios, rp.PreviousPrioritiesUpdateFrequency)
	}
	tries := 2 // hostSelectionRetryCount() is 1 on a first try
	if retry {
		tries = max(rp.HostSelectionMaxAttempts, 1) + 1
	}
	var ep *Endpoint
	for range tries {
		p := choosePriority(load, s.rng.Uint64())
		var cands []int
		for _, i := range ps.hosts[p] {
			if ps.panic[p] || !c.Endpoints[i].Unhealthy {
				cands = append(cands, i)
			}
		}
		if ps.panic[p] {
			s.stats.lbPanic.Add(1)
		}
		if len(cands) == 0 {
			return nil
		}
		total := 0
		for _, i := range cands {
			total += weight(c.Endpoints[i])
		}
		n := s.rng.IntN(total)
		pick := cands[0]
		for _, i := range cands {
			n -= weight(c.Endpoints[i])
			if n < 0 {
				pick = i
				break
			}
		}
		e := c.Endpoints[pick]
		ep = &e
		if !retry || !rp.PreviousHosts || !triedHost(attempted, ep.Address) {
			return ep
		}
	}
	return ep
}

func triedHost(attempted []*Endpoint, addr string) bool {
	for _, e := range attempted {
		if e.Address == addr {
			return true
		}
	}
	return false
}

func weight(e Endpoint) int {
	if e.Weight <= 0 {
		return 1
	}
	return e.Weight
}
