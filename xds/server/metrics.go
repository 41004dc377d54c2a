package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// metrics of the control plane. Labels come from config and code only.
type metrics struct {
	pushes          *prometheus.CounterVec   // kind: full | endpoints
	rejected        prometheus.Counter       // configs that failed translation or validation
	snapshotInfo    *prometheus.GaugeVec     // group, type, version = 1
	streams         *prometheus.GaugeVec     // protocol: sotw | delta
	nacks           *prometheus.CounterVec   // type
	pushSeconds     *prometheus.HistogramVec // kind
	healthToPush    prometheus.Histogram     // Changes() signal to snapshot set
	resolveFailures prometheus.Counter
	capacity        *prometheus.GaugeVec // backend, measure: attempts | refused (per minute)
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_xds_pushes_total", Help: "Snapshots set, by kind (full: config change, endpoints: EDS-only).",
		}, []string{"kind"}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_xds_rejected_configs_total", Help: "Configs rejected (translation or validation failed); the last good snapshot kept serving.",
		}),
		snapshotInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swarmgate_xds_snapshot_version_info", Help: "Current snapshot version per node group and type (value 1).",
		}, []string{"group", "type", "version"}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swarmgate_xds_connected_streams", Help: "Open xDS streams.",
		}, []string{"protocol"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_xds_nacks_total", Help: "Responses a client rejected, by type URL.",
		}, []string{"type"}),
		pushSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "swarmgate_xds_push_seconds", Help: "Time to translate, validate and set a snapshot.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"kind"}),
		healthToPush: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "swarmgate_xds_health_push_seconds", Help: "From a backend health change signal to the EDS snapshot being set.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		resolveFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_xds_dns_failures_total", Help: "Backend host name lookups that failed.",
		}),
		capacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swarmgate_xds_backend_capacity_per_minute",
			Help: "What a backend's keys can take as the locality weights were last built from it (admission.capacity_weights): attempts, and the refused part of them.",
		}, []string{"backend", "measure"}),
	}
	if reg != nil {
		reg.MustRegister(m.pushes, m.rejected, m.snapshotInfo, m.streams, m.nacks, m.pushSeconds, m.healthToPush, m.resolveFailures, m.capacity)
	}
	return m
}

// setCapacity records the capacity the weights are built from; backends
// no longer reported lose their series.
func (m *metrics) setCapacity(was, now map[string]contract.Capacity) {
	for b := range was {
		if _, ok := now[b]; !ok {
			m.capacity.DeleteLabelValues(b, "attempts")
			m.capacity.DeleteLabelValues(b, "refused")
		}
	}
	for b, c := range now {
		m.capacity.WithLabelValues(b, "attempts").Set(c.Attempts)
		m.capacity.WithLabelValues(b, "refused").Set(c.Refused)
	}
}
