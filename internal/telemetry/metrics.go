package telemetry

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Metric names exported by this package. docs/operations-observability.md
// lists them with their labels; deploy/grafana's test checks the dashboard
// only uses names that some package exports.
const (
	MetricRequests          = "swarmgate_requests_total"
	MetricRequestDuration   = "swarmgate_request_duration_seconds"
	MetricPhaseDuration     = "swarmgate_extproc_phase_duration_seconds"
	MetricTimeToFirstToken  = "swarmgate_time_to_first_token_seconds"
	MetricTimePerOutputTok  = "swarmgate_time_per_output_token_seconds"
	MetricTokens            = "swarmgate_tokens_total"
	MetricCost              = "swarmgate_cost_total"
	MetricRateLimitDecision = "swarmgate_limit_decisions_total"
)

// Other is the label value for anything not in the config (or not in a
// fixed set), None the value for "not known" (e.g. a refusal before auth).
const (
	Other = "other"
	None  = "none"
)

// Labels identify a request's series. Every value must come from the config
// (tenant name, model alias, backend name); Metrics maps any other value to
// Other, so a client-chosen model name can never create a series.
type Labels struct {
	Tenant  string
	Model   string // public model alias
	Backend string
}

// Tokens is a request's token usage. CachedInput is part of Input and
// Reasoning part of Output, as providers report them.
type Tokens struct {
	Input       int64
	Output      int64
	CachedInput int64
	Reasoning   int64
}

// Completion is everything the data path knows when a request ends.
type Completion struct {
	Labels
	// Status is the HTTP status sent to the client; 0 when there was none
	// (client went away, stream reset).
	Status int
	// Latency is request start to the last response byte.
	Latency time.Duration
	// TTFT is request start to the first content chunk of a stream; zero for
	// non-streamed responses (no first token to time).
	TTFT   time.Duration
	Tokens Tokens
	Cost   float64 // in config.Accounting.Currency
}

// Filter is which of the two ext_proc filters a message came from.
type Filter uint8

const (
	FilterRouter   Filter = iota // router-level filter, once per request
	FilterUpstream               // upstream filter, once per attempt
	numFilters
)

var filterNames = [numFilters]string{"router", "upstream"}

// Phase is an ext_proc message kind.
type Phase uint8

const (
	PhaseRequestHeaders Phase = iota
	PhaseRequestBody
	PhaseRequestTrailers
	PhaseResponseHeaders
	PhaseResponseBody
	PhaseResponseTrailers
	numPhases
)

var phaseNames = [numPhases]string{
	"request_headers", "request_body", "request_trailers",
	"response_headers", "response_body", "response_trailers",
}

// String returns the label value.
func (p Phase) String() string {
	if p < numPhases {
		return phaseNames[p]
	}
	return Other
}

// String returns the label value.
func (f Filter) String() string {
	if f < numFilters {
		return filterNames[f]
	}
	return Other
}

// Limit is which limit a rate-limit decision was about.
type Limit string

const (
	LimitRPM    Limit = "rpm"
	LimitRPD    Limit = "rpd"
	LimitTPM    Limit = "tpm"
	LimitBudget Limit = "budget"
)

// Decision is the outcome of a rate-limit or budget check.
type Decision string

const (
	DecisionAllowed    Decision = "allowed"
	DecisionLimited    Decision = "limited"     // refused: over the limit
	DecisionFailOpen   Decision = "fail_open"   // store unreachable, let through
	DecisionFailClosed Decision = "fail_closed" // store unreachable, refused
)

// Histogram buckets follow the OpenTelemetry GenAI semantic conventions
// (gen_ai.server.time_to_first_token, gen_ai.server.time_per_output_token,
// gen_ai.client.operation.duration), so dashboards compare across gateways.
var (
	ttftBuckets     = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
	tpotBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92, 163.84, 327.68}
	// ext_proc phases should take well under a millisecond; 50µs to ~3s.
	phaseBuckets = prometheus.ExponentialBuckets(0.00005, 2.5, 12)
)

// Metrics is the data path's Prometheus families that belong to no single
// package. It is safe for concurrent use; a nil *Metrics records nothing.
type Metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	phase     *prometheus.HistogramVec
	phaseObs  [numFilters][numPhases]prometheus.Observer
	ttft      *prometheus.HistogramVec
	tpot      *prometheus.HistogramVec
	tokens    *prometheus.CounterVec
	cost      *prometheus.CounterVec
	rateLimit *prometheus.CounterVec

	statuses [600]string // "0", "100".."599"; others empty
	allowed  atomic.Pointer[allowList]
}

// requestSeries is one (tenant, model, backend)'s children, resolved on first
// use and then kept: ObserveRequest would otherwise hash and look up about
// nine label sets per request. The key values are bounded (config names,
// Other, None), so the cache is too; SetConfig starts a new one. Children
// are created lazily so that /metrics shows only series that were used.
type requestSeries struct {
	key                  seriesKey
	duration, ttft, tpot lazy[prometheus.Observer]
	tokens               [4]lazy[prometheus.Counter] // tokenKinds
	cost                 lazy[prometheus.Counter]
	requests             sync.Map // status label -> prometheus.Counter
}

type seriesKey struct{ tenant, model, backend string }

// lazy is a child metric resolved once.
type lazy[T any] struct{ p atomic.Pointer[T] }

// get returns the child, resolving it on first use. resolve captures
// nothing (a static function), so a call does not allocate.
func (l *lazy[T]) get(m *Metrics, k seriesKey, i int, resolve func(m *Metrics, k seriesKey, i int) T) T {
	if v := l.p.Load(); v != nil {
		return *v
	}
	v := resolve(m, k, i) // racing resolvers get the same child from the vec
	l.p.Store(&v)
	return v
}

var tokenKinds = [4]string{"input", "output", "cached_input", "reasoning"}

// allowList is the set of label values the current config allows, and the
// series resolved under it.
type allowList struct {
	tenants, models, backends map[string]struct{}
	series                    sync.Map // seriesKey -> *requestSeries
}

// NewMetrics creates the families and registers them with reg (nil: create
// but do not register). cfg supplies the allowed tenants, models and
// backends; call SetConfig after a reload.
func NewMetrics(reg prometheus.Registerer, cfg *config.Config) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRequests,
			Help: "Requests finished, by tenant, model alias, backend and HTTP status sent to the client (0: none).",
		}, []string{"tenant", "model", "backend", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricRequestDuration,
			Help:    "Request start to last response byte, by model alias and backend.",
			Buckets: durationBuckets,
		}, []string{"model", "backend"}),
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricPhaseDuration,
			Help:    "Time ext_proc spends on one message, by filter (router, upstream) and phase.",
			Buckets: phaseBuckets,
		}, []string{"filter", "phase"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricTimeToFirstToken,
			Help:    "Streamed requests: request start to the first content chunk, by model alias and backend.",
			Buckets: ttftBuckets,
		}, []string{"model", "backend"}),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricTimePerOutputTok,
			Help:    "Streamed successful requests: time per output token after the first, by model alias and backend.",
			Buckets: tpotBuckets,
		}, []string{"model", "backend"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricTokens,
			Help: "Tokens used, by tenant, model alias, backend and type (input, output, cached_input within input, reasoning within output).",
		}, []string{"tenant", "model", "backend", "type"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricCost,
			Help: "Cost charged, in accounting.currency, by tenant, model alias and backend.",
		}, []string{"tenant", "model", "backend"}),
		rateLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRateLimitDecision,
			Help: "Rate-limit and budget decisions made by swarmgate, by tenant, model alias, limit and decision.",
		}, []string{"tenant", "model", "limit", "decision"}),
	}
	for f := range numFilters {
		for p := range numPhases {
			m.phaseObs[f][p] = m.phase.WithLabelValues(filterNames[f], phaseNames[p])
		}
	}
	m.statuses[0] = "0"
	for s := 100; s < len(m.statuses); s++ {
		m.statuses[s] = strconv.Itoa(s)
	}
	m.SetConfig(cfg)
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.phase, m.ttft, m.tpot, m.tokens, m.cost, m.rateLimit)
	}
	return m
}

// SetConfig replaces the allowed label values (config reload). Series of
// tenants that were removed stay until restart; they no longer grow.
func (m *Metrics) SetConfig(cfg *config.Config) {
	if m == nil {
		return
	}
	a := &allowList{
		tenants:  map[string]struct{}{},
		models:   map[string]struct{}{},
		backends: map[string]struct{}{},
	}
	if cfg != nil {
		for _, t := range cfg.Tenants {
			a.tenants[t.Name] = struct{}{}
		}
		for _, md := range cfg.Models {
			a.models[md.Name] = struct{}{}
		}
		for _, b := range cfg.Backends {
			a.backends[b.Name] = struct{}{}
		}
	}
	m.allowed.Store(a)
}

func bound(set map[string]struct{}, v string) string {
	if v == "" {
		return None
	}
	if _, ok := set[v]; ok {
		return v
	}
	return Other
}

func (m *Metrics) status(code int) string {
	if code >= 0 && code < len(m.statuses) && m.statuses[code] != "" {
		return m.statuses[code]
	}
	return Other
}

// ObserveRequest records one finished request: its count, latency, time to
// first token and per output token (streams), tokens and cost. Call it
// once per request, when the response ends or the request is refused.
func (m *Metrics) ObserveRequest(c Completion) {
	if m == nil {
		return
	}
	a := m.allowed.Load()
	sr := m.seriesOf(a, seriesKey{bound(a.tenants, c.Tenant), bound(a.models, c.Model), bound(a.backends, c.Backend)})
	k := sr.key
	sr.request(m, m.status(c.Status)).Inc()
	if c.Latency > 0 {
		sr.duration.get(m, k, 0, func(m *Metrics, k seriesKey, _ int) prometheus.Observer {
			return m.duration.WithLabelValues(k.model, k.backend)
		}).Observe(c.Latency.Seconds())
	}
	if c.TTFT > 0 {
		sr.ttft.get(m, k, 0, func(m *Metrics, k seriesKey, _ int) prometheus.Observer {
			return m.ttft.WithLabelValues(k.model, k.backend)
		}).Observe(c.TTFT.Seconds())
		// GenAI semconv: time per output token after the first, successful
		// responses only.
		if c.Status >= 200 && c.Status < 300 && c.Tokens.Output > 1 && c.Latency > c.TTFT {
			per := (c.Latency - c.TTFT).Seconds() / float64(c.Tokens.Output-1)
			sr.tpot.get(m, k, 0, func(m *Metrics, k seriesKey, _ int) prometheus.Observer {
				return m.tpot.WithLabelValues(k.model, k.backend)
			}).Observe(per)
		}
	}
	for i, n := range [4]int64{c.Tokens.Input, c.Tokens.Output, c.Tokens.CachedInput, c.Tokens.Reasoning} {
		if n > 0 {
			sr.tokens[i].get(m, k, i, func(m *Metrics, k seriesKey, i int) prometheus.Counter {
				return m.tokens.WithLabelValues(k.tenant, k.model, k.backend, tokenKinds[i])
			}).Add(float64(n))
		}
	}
	if c.Cost > 0 {
		sr.cost.get(m, k, 0, func(m *Metrics, k seriesKey, _ int) prometheus.Counter {
			return m.cost.WithLabelValues(k.tenant, k.model, k.backend)
		}).Add(c.Cost)
	}
}

func (m *Metrics) seriesOf(a *allowList, k seriesKey) *requestSeries {
	if v, ok := a.series.Load(k); ok {
		return v.(*requestSeries)
	}
	v, _ := a.series.LoadOrStore(k, &requestSeries{key: k})
	return v.(*requestSeries)
}

func (sr *requestSeries) request(m *Metrics, status string) prometheus.Counter {
	if v, ok := sr.requests.Load(status); ok {
		return v.(prometheus.Counter)
	}
	c := m.requests.WithLabelValues(sr.key.tenant, sr.key.model, sr.key.backend, status)
	sr.requests.Store(status, c)
	return c
}

// ObservePhase records the time ext_proc spent on one message. It does not
// allocate; unknown filters or phases are dropped.
func (m *Metrics) ObservePhase(f Filter, p Phase, d time.Duration) {
	if m == nil || f >= numFilters || p >= numPhases {
		return
	}
	m.phaseObs[f][p].Observe(d.Seconds())
}

// ObserveRateLimit records one rate-limit or budget decision swarmgate made
// itself (the Envoy rate-limit service keeps its own statistics).
func (m *Metrics) ObserveRateLimit(tenant, model string, limit Limit, d Decision) {
	if m == nil {
		return
	}
	a := m.allowed.Load()
	l := string(limit)
	switch limit {
	case LimitRPM, LimitRPD, LimitTPM, LimitBudget:
	default:
		l = Other
	}
	dec := string(d)
	switch d {
	case DecisionAllowed, DecisionLimited, DecisionFailOpen, DecisionFailClosed:
	default:
		dec = Other
	}
	m.rateLimit.WithLabelValues(bound(a.tenants, tenant), bound(a.models, model), l, dec).Inc()
}
