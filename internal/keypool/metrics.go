package keypool

import "github.com/prometheus/client_golang/prometheus"

// metrics are the keypool's Prometheus series. Labels come from config only
// (backend name, key id), never from requests, and never carry a secret.
type metrics struct {
	picks         *prometheus.CounterVec
	pickFailures  *prometheus.CounterVec
	inFlight      *prometheus.GaugeVec
	state         *prometheus.GaugeVec
	trips         *prometheus.CounterVec
	probes        *prometheus.CounterVec
	leasesExpired *prometheus.CounterVec
	unanswered    *prometheus.CounterVec
	authFailures  *prometheus.CounterVec
	healthy       *prometheus.GaugeVec
	syncErrors    *prometheus.CounterVec
	syncDropped   prometheus.Counter
	lag           *prometheus.HistogramVec
	paceWait      *prometheus.HistogramVec
	paceOverflow  *prometheus.CounterVec
	paceExtended  prometheus.Counter
}

// keyMetrics are one key's series, resolved once so the hot path does no
// label lookups.
type keyMetrics struct {
	picks     prometheus.Counter
	inFlight  prometheus.Gauge
	state     prometheus.Gauge
	probeOK   prometheus.Counter
	probeFail prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		picks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_keypool_picks_total", Help: "Upstream attempts given each key.",
		}, []string{"backend", "key"}),
		pickFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_keypool_pick_failures_total", Help: "Picks that found no usable key.",
		}, []string{"backend"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swarmgate_keypool_in_flight", Help: "Attempts holding a key on this replica.",
		}, []string{"backend", "key"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swarmgate_keypool_breaker_state", Help: "Key breaker state: 0 closed, 1 open, 2 half-open.",
		}, []string{"backend", "key"}),
		trips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_keypool_breaker_trips_total", Help: "Key breaker openings on this replica, by reason (429, 5xx, quota).",
		}, []string{"backend", "key", "reason"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_keypool_probes_total", Help: "Half-open probe results.",
		}, []string{"backend", "key", "result"}),
		leasesExpired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_keypool_leases_expired_total", Help: "Leases freed by TTL because no outcome came.",
		}, []string{"backend"}),
		unanswered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_keypool_unanswered_total",
			Help: "Attempts that ended without response headers, by verdict: reset (counted against the key) or cancelled (the client went away).",
		}, []string{"backend", "verdict"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_keypool_auth_failures_total",
			Help: "Attempts the provider refused with 401 or 403 (a revoked or mistyped key, or one without access): alert on any increase.",
		}, []string{"backend", "key", "status"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swarmgate_keypool_backend_healthy", Help: "1 when some key of the backend is not open.",
		}, []string{"backend"}),
		syncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_keypool_redis_sync_errors_total", Help: "Failed Redis operations of breaker sync, by operation.",
		}, []string{"op"}),
		syncDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_keypool_redis_sync_dropped_total", Help: "Sync writes dropped because the queue was full.",
		}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "swarmgate_keypool_propagation_lag_seconds",
			Help:    "Time from a breaker transition on one replica to its adoption here, by path (pubsub, poll).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"path"}),
		paceWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "swarmgate_keypool_pace_wait_seconds",
			Help:    "Time picks waited for a key's own pace slot (only picks that waited).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"backend"}),
		paceOverflow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_keypool_pace_overflow_total",
			Help: "Picks that found every key paced beyond their wait bound and took a key without a pace slot.",
		}, []string{"backend"}),
		paceExtended: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_keypool_pace_extended_total",
			Help: "Picks that extended Envoy's message timer to wait for a paced key's slot beyond message_timeout's share.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.picks, m.pickFailures, m.inFlight, m.state, m.trips, m.probes,
			m.leasesExpired, m.unanswered, m.authFailures, m.healthy, m.syncErrors, m.syncDropped, m.lag,
			m.paceWait, m.paceOverflow, m.paceExtended)
	}
	return m
}

func (m *metrics) forKey(backend, key string) keyMetrics {
	return keyMetrics{
		picks:     m.picks.WithLabelValues(backend, key),
		inFlight:  m.inFlight.WithLabelValues(backend, key),
		state:     m.state.WithLabelValues(backend, key),
		probeOK:   m.probes.WithLabelValues(backend, key, "ok"),
		probeFail: m.probes.WithLabelValues(backend, key, "fail"),
	}
}

// forget drops a removed key's series.
func (m *metrics) forget(backend, key string) {
	m.picks.DeleteLabelValues(backend, key)
	m.inFlight.DeleteLabelValues(backend, key)
	m.state.DeleteLabelValues(backend, key)
	m.probes.DeleteLabelValues(backend, key, "ok")
	m.probes.DeleteLabelValues(backend, key, "fail")
	for _, s := range []string{"401", "403"} {
		m.authFailures.DeleteLabelValues(backend, key, s)
	}
	for _, r := range []Reason{ReasonRateLimited, ReasonFailures, ReasonQuota, ReasonAuth} {
		m.trips.DeleteLabelValues(backend, key, string(r))
	}
}
