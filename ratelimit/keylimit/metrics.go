package keylimit

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	checks   *prometheus.CounterVec // key (config id), result
	duration prometheus.Histogram
}

const (
	resultAllowed = "allowed"
	resultLimited = "limited"
	resultError   = "error"
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_ratelimit_key_checks_total",
			Help: "Per-upstream-key RPM/TPM checks against the rate-limit service, by key id and result.",
		}, []string{"key", "result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swarmgate_ratelimit_key_check_duration_seconds",
			Help:    "Round trip of one per-key check to the rate-limit service.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
		}),
	}
	if reg != nil {
		reg.MustRegister(m.checks, m.duration)
	}
	return m
}
