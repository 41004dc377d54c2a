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
	"github.com/swarmgate/swarmgate/internal/routing"
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
	AdmissionMaxWait time.Duration
	// KeySlotWait is the longest an attempt's key pick waits for a paced
	// key's slot: the upstream ext_proc holds the headers message that long.
	KeySlotWait         time.Duration
	ExtProcFailOpen     bool
	RateLimitFailClosed bool
	TokenLimits         bool // tenant TPM is enforced by the Envoy rate-limit filter
	// Subkeys: sub-keys are on, and their limits go through the Envoy
	// rate-limit filter (descriptors only; the service needs no config).
	Subkeys   bool
	AccessLog bool

	Retry   config.RetryPolicy
	Breaker config.BreakerPolicy

	// Pools is sorted by cluster name.
	Pools []Pool
}

// Pool is one Envoy cluster serving a model alias, or the alias restricted
// to some of its targets (internal/routing decides which; the restriction
// fields are those of contract.Pool, which names the cluster).
type Pool struct {
	Alias      string
	Cluster    string
	MinContext int // 0: unrestricted
	// Family restricts the pool to targets whose backend takes this API
	// family, natively or translated, or with Native natively only; ""
	// for every target.
	Family string
	Native bool
	// Backend restricts the pool to one backend's targets; "" for every
	// target.
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
		KeySlotWait:         keySlotWait(cfg),
		ExtProcFailOpen:     cfg.FailureModes.ExtProc == config.FailOpen,
		RateLimitFailClosed: cfg.FailureModes.RateLimit == config.FailClosed,
		TokenLimits:         cfg.Accounting.TokenLimits == "ratelimit",
		Subkeys:             cfg.Subkeys.Enabled,
		AccessLog:           cfg.Telemetry.AccessLog,
		Retry:               cfg.Retry,
		Breaker:             cfg.Breaker,
	}
	// Which clusters, with which targets: internal/routing, the same plan
	// the data path chooses among.
	for _, p := range routing.Plan(cfg) {
		g.Pools = append(g.Pools, buildPool(cfg, &p))
	}
	slices.SortFunc(g.Pools, func(a, b Pool) int { return cmp(a.Cluster, b.Cluster) })
	return g
}

// buildPool resolves one planned pool for Envoy: timeouts, dense
// priorities and thresholds over its targets.
func buildPool(cfg *config.Config, rp *routing.Pool) Pool {
	m := rp.Model
	p := Pool{
		Alias:       rp.Alias,
		Cluster:     rp.Cluster(),
		MinContext:  rp.MinContext,
		Family:      rp.Family,
		Native:      rp.Native,
		Backend:     rp.Backend,
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
	// weights of at least 1). Thresholds are summed over the others only.
	var prios []int
	for i := range rp.Targets {
		if rp.Targets[i].Weight > 0 {
			prios = append(prios, rp.Targets[i].Priority)
		}
	}
	slices.Sort(prios)
	prios = slices.Compact(prios)
	for _, t := range rp.Targets {
		if t.Weight <= 0 {
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

// keySlotWait is the key pick's long wait bound when keys are paced.
func keySlotWait(cfg *config.Config) time.Duration {
	if !cfg.Admission.Pace {
		return 0
	}
	_, long := cfg.KeySlotWait()
	return long
}
