package reserve

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	admitted         *prometheus.CounterVec
	refused          *prometheus.CounterVec
	storeFailures    *prometheus.CounterVec
	refundedTokens   prometheus.Counter
	refundedMoney    prometheus.Counter
	settleErrors     prometheus.Counter
	duplicateSettles prometheus.Counter
	buffer           *prometheus.CounterVec
	buffered         prometheus.Gauge
	latency          prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_reserve_admitted_total",
			Help: "Requests admitted by the reservation script.",
		}, []string{"tenant"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_reserve_refused_total",
			Help: "Requests refused by the reservation script, by the scope that refused.",
		}, []string{"tenant", "scope"}),
		storeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_reserve_store_failures_total",
			Help: "Reservations that could not reach Redis, by limit kind and the failure mode applied.",
		}, []string{"limit", "mode"}),
		refundedTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_reserve_refunded_tokens_total",
			Help: "Reserved tokens given back at settle (reserved minus actual).",
		}),
		refundedMoney: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_reserve_refunded_cost_total",
			Help: "Reserved money given back at settle, in the configured currency.",
		}),
		settleErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_reserve_settle_errors_total",
			Help: "Settle attempts Redis did not take (direct or replay); unreachable-Redis ones are buffered and replayed.",
		}),
		duplicateSettles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_reserve_duplicate_settles_total",
			Help: "Settles of an already settled request id (ignored).",
		}),
		buffer: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_reserve_settle_buffer_total",
			Help: "Settles and releases Redis did not take, by event: buffered, replayed, expired (the hold freed itself first), dropped (buffer full, refused by Redis, shutdown; the hold counts until its TTL).",
		}, []string{"event"}),
		buffered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "swarmgate_reserve_settles_buffered",
			Help: "Settles and releases waiting in memory for Redis.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swarmgate_reserve_seconds",
			Help:    "Latency of the reservation script.",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .5},
		}),
	}
	if reg != nil {
		reg.MustRegister(m.admitted, m.refused, m.storeFailures, m.refundedTokens, m.refundedMoney,
			m.settleErrors, m.duplicateSettles, m.buffer, m.buffered, m.latency)
	}
	return m
}
