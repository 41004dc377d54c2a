// Package ir is the intermediate representation between the validated config
// and the xDS resources (the Envoy Gateway pattern: config → IR → xDS). It
// resolves everything Envoy needs per pool cluster (targets, priorities,
// thresholds, timeouts) once, in a deterministic order, so the translator
// only formats and the endpoint (EDS) step can be re-run alone when backend
// health or DNS answers change.
package ir

import (
	"slices"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// Gateway is everything the Envoy side needs, derived from one config.
type Gateway struct {
	ListenerAddress string
	ListenerPort    uint32
	MaxBodyBytes    uint32

	ExtProcAddress   string
	RateLimitAddress string
	RateLimitDomain  string
	RateLimitTimeout time.Duration

	MessageTimeout time.Duration
	// AdmissionMaxWait is the longest admission wait of any tenant or
	// class: the router-level ext_proc holds the body message that long.
	AdmissionMaxWait    time.Duration
	ExtProcFailOpen     bool
	RateLimitFailClosed bool
	TokenLimits         bool // tenant TPM is enforced by the Envoy rate-limit filter
	AccessLog           bool

	Retry   config.RetryPolicy
	Breaker config.BreakerPolicy

	// Pools is sorted by cluster name.
	Pools []Pool
}

// Pool is one Envoy cluster serving a model alias (or the alias restricted
// to targets with a large enough context window).
type Pool struct {
	Alias      string
	Cluster    string
	MinContext int // 0: unrestricted
	// Family restricts the pool to targets whose backend takes this API
	// family, natively or translated (contract.PoolFamilyCluster), or with
	// Native natively only (contract.PoolNativeCluster); "" for every
	// target.
	Family string
	Native bool
	// Backend restricts the pool to one backend's targets
	// (contract.PoolBackendCluster); "" for every target.
	Backend string

	Timeout        time.Duration // ordinary requests
	LongTimeout    time.Duration // x-swarmgate-long: 1
	ConnectTimeout time.Duration
	// Circuit-breaker thresholds: sums over the pool's backends (each backend
	// is a different host of this cluster, so the cluster as a whole may use
	// every backend up to its own limit at once).
	MaxConnections, MaxPendingRequests, MaxRequests uint32
	// MaxConnectionsPerHost is the largest backend value: Envoy has one
	// per-host threshold per cluster, and the least restrictive one never
	// throttles a backend below its own limit.
	MaxConnectionsPerHost uint32

	// Targets sorted by priority, then backend name.
	Targets []Target
}

// HasTLS reports whether any target is reached over HTTPS.
func (p *Pool) HasTLS() bool {
	for _, t := range p.Targets {
		if t.TLS {
			return true
		}
	}
	return false
}

// Target is one backend of a pool: one EDS locality.
type Target struct {
	Backend       string
	Host          string // IP or DNS name from base_url
	Port          uint32
	ServerName    string // SNI and Host header
	TLS           bool
	CAFile        string
	Insecure      bool
	UpstreamModel string
	Weight        uint32
	// Priority is the config priority made dense (0, 2, 5 → 0, 1, 2):
	// Envoy expects priorities without gaps.
	Priority uint32
}

// Build derives the IR from a validated config.
func Build(cfg *config.Config) *Gateway {
	g := &Gateway{
		ListenerAddress:     cfg.Envoy.ListenerAddress,
		ListenerPort:        cfg.Envoy.ListenerPort,
		MaxBodyBytes:        clampU32(int64(cfg.Request.MaxBodyBytes)),
		ExtProcAddress:      cfg.Envoy.ExtProcAddress,
		RateLimitAddress:    cfg.Envoy.RateLimitAddress,
		RateLimitDomain:     cfg.Envoy.RateLimitDomain,
		RateLimitTimeout:    cfg.Envoy.RateLimitTimeout.D(),
		MessageTimeout:      cfg.Request.MessageTimeout.D(),
		AdmissionMaxWait:    cfg.LongestAdmissionWait(),
		ExtProcFailOpen:     cfg.FailureModes.ExtProc == config.FailOpen,
		RateLimitFailClosed: cfg.FailureModes.RateLimit == config.FailClosed,
		TokenLimits:         cfg.Accounting.TokenLimits == "ratelimit",
		AccessLog:           cfg.Telemetry.AccessLog,
		Retry:               cfg.Retry,
		Breaker:             cfg.Breaker,
	}
	for i := range cfg.Models {
		m := &cfg.Models[i]
		g.Pools = append(g.Pools, buildPool(cfg, m, poolSel{}))
		for _, sel := range familyPools(cfg, m) {
			g.Pools = append(g.Pools, buildPool(cfg, m, sel))
		}
		for _, b := range affinityBackends(cfg, m) {
			g.Pools = append(g.Pools, buildPool(cfg, m, poolSel{family: config.FamilyResponses, native: true, backend: b}))
		}
		for _, w := range contextWindows(m) {
			g.Pools = append(g.Pools, buildPool(cfg, m, poolSel{minContext: w}))
		}
	}
	slices.SortFunc(g.Pools, func(a, b Pool) int { return cmp(a.Cluster, b.Cluster) })
	return g
}

// contextWindows lists the distinct known context windows of a model's
// targets above the smallest: one restricted cluster each
// (contract.PoolContextCluster). When some targets have no known window,
// one more, above every known window, holds only those: the router sends a
// request too long for every known window there (extproc requestBody).
func contextWindows(m *config.Model) []int {
	var ws []int
	unknown := false
	for _, t := range m.Targets {
		if t.ContextWindow > 0 {
			ws = append(ws, t.ContextWindow)
		} else {
			unknown = true
		}
	}
	slices.Sort(ws)
	ws = slices.Compact(ws)
	if len(ws) == 0 {
		return nil
	}
	out := ws[1:]
	if unknown {
		out = append(out, ws[len(ws)-1]+1)
	}
	return out
}

// familyPools lists the restricted clusters a model needs per API family
// (extproc requestBody picks among them):
//   - poolfam_<family>: the targets whose backend takes the family at all,
//     natively or translated, when only some do;
//   - poolnat_<family>: the targets that speak it natively, when others
//     take it only translated: for requests the translator cannot express
//     (and count_tokens, which has no translation).
//
// Retries stay inside the cluster, so every attempt can serve the request.
func familyPools(cfg *config.Config, m *config.Model) []poolSel {
	var out []poolSel
	for _, f := range config.FamilyNames {
		reach, native := 0, 0
		for _, t := range m.Targets {
			b, ok := cfg.Backend(t.Backend)
			if !ok {
				continue
			}
			if _, ok := b.Route(f); ok {
				reach++
			}
			if b.Serves(f) {
				native++
			}
		}
		var sels []poolSel
		if reach > 0 && reach < len(m.Targets) {
			sels = append(sels, poolSel{family: f})
		}
		if native > 0 && native < reach {
			sels = append(sels, poolSel{family: f, native: true})
		}
		for _, sel := range sels {
			out = append(out, sel)
			// Each restricted further by context window, as the whole
			// pool is (contextWindows), over the selection's targets.
			var in []config.Target
			for _, t := range m.Targets {
				if sel.admits(cfg, &t) {
					in = append(in, t)
				}
			}
			for _, w := range contextWindows(&config.Model{Targets: in}) {
				out = append(out, poolSel{family: f, native: sel.native, minContext: w})
			}
		}
	}
	return out
}

// admits reports whether a target's backend is in the family selection
// (context windows aside).
func (sel poolSel) admits(cfg *config.Config, t *config.Target) bool {
	if sel.backend != "" && t.Backend != sel.backend {
		return false
	}
	if sel.family == "" {
		return true
	}
	b, ok := cfg.Backend(t.Backend)
	if !ok {
		return false
	}
	_, reach := b.Route(sel.family)
	return reach && (!sel.native || b.Serves(sel.family))
}

// affinityBackends lists the backends of a model with more than one
// target that serve the Responses API: one cluster each, for requests
// naming a previous_response_id, which only the backend (and key) that
// created it can continue (extproc requestBody). A model of one target
// routes them to its own cluster.
func affinityBackends(cfg *config.Config, m *config.Model) []string {
	var out []string
	for _, t := range m.Targets {
		if b, ok := cfg.Backend(t.Backend); ok && b.Serves(config.FamilyResponses) && t.Weight > 0 && len(m.Targets) > 1 &&
			!slices.Contains(out, b.Name) {
			out = append(out, b.Name)
		}
	}
	return out
}

// poolSel selects a model's targets for one cluster; the zero value is
// every target (PoolCluster).
type poolSel struct {
	minContext int    // targets with a window at least this (or unknown)
	family     string // targets whose backend takes this API family
	native     bool   // ... natively, not translated
	backend    string // one backend's targets only
}

func (sel poolSel) cluster(model string) string {
	switch {
	case sel.backend != "":
		return contract.PoolBackendCluster(model, sel.backend)
	case sel.family != "":
		return contract.PoolFamilyContextCluster(model, sel.family, sel.native, sel.minContext)
	}
	return contract.PoolContextCluster(model, sel.minContext)
}

func buildPool(cfg *config.Config, m *config.Model, sel poolSel) Pool {
	p := Pool{
		Alias:       m.Name,
		Cluster:     sel.cluster(m.Name),
		MinContext:  sel.minContext,
		Family:      sel.family,
		Native:      sel.native,
		Backend:     sel.backend,
		Timeout:     cfg.Request.Timeout.D(),
		LongTimeout: cfg.Request.LongTimeout.D(),
	}
	if m.Timeout.D() > 0 {
		p.Timeout = m.Timeout.D()
	}
	if m.LongRunning || p.LongTimeout < p.Timeout {
		p.Timeout = max(p.Timeout, p.LongTimeout)
		p.LongTimeout = p.Timeout
	}
	// A target of weight 0 is drained: no locality (Envoy requires locality
	// weights of at least 1). Thresholds are summed over the selected
	// targets only.
	skip := func(t *config.Target) bool {
		if !sel.admits(cfg, t) {
			return true
		}
		return t.Weight <= 0 || (sel.minContext > 0 && t.ContextWindow > 0 && t.ContextWindow < sel.minContext)
	}
	var prios []int
	for i := range m.Targets {
		if !skip(&m.Targets[i]) {
			prios = append(prios, m.Targets[i].Priority)
		}
	}
	slices.Sort(prios)
	prios = slices.Compact(prios)
	for _, t := range m.Targets {
		if skip(&t) {
			continue
		}
		b, ok := cfg.Backend(t.Backend)
		if !ok {
			continue // validated: cannot happen
		}
		prio, _ := slices.BinarySearch(prios, t.Priority)
		p.Targets = append(p.Targets, Target{
			Backend:       b.Name,
			Host:          b.Host(),
			Port:          b.Port(),
			ServerName:    b.ServerName(),
			TLS:           b.TLSEnabled(),
			CAFile:        b.TLS.CAFile,
			Insecure:      b.TLS.InsecureSkipVerify,
			UpstreamModel: t.Model,
			Weight:        clampU32(int64(t.Weight)),
			Priority:      uint32(prio),
		})
		p.ConnectTimeout = max(p.ConnectTimeout, b.ConnectTimeout.D())
		p.MaxConnections = addU32(p.MaxConnections, b.MaxConnections)
		p.MaxPendingRequests = addU32(p.MaxPendingRequests, b.MaxPendingRequests)
		p.MaxRequests = addU32(p.MaxRequests, b.MaxRequests)
		p.MaxConnectionsPerHost = max(p.MaxConnectionsPerHost, clampU32(int64(b.MaxConnections)))
	}
	if p.ConnectTimeout <= 0 {
		p.ConnectTimeout = 5 * time.Second
	}
	slices.SortFunc(p.Targets, func(a, b Target) int {
		if a.Priority != b.Priority {
			return int(a.Priority) - int(b.Priority)
		}
		return cmp(a.Backend, b.Backend)
	})
	return p
}

func addU32(a uint32, b int) uint32 { return clampU32(int64(a) + int64(b)) }

func clampU32(n int64) uint32 {
	switch {
	case n < 0:
		return 0
	case n > 1<<32-1:
		return 1<<32 - 1
	}
	return uint32(n)
}

func cmp(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
