package service

import "github.com/prometheus/client_golang/prometheus"

// metrics of the embedded rate-limit service. Labels are fixed enums.
type metrics struct {
	requests      *prometheus.CounterVec // code: ok | over_limit | error | not_ready
	duration      prometheus.Histogram
	redisErrors   prometheus.Counter
	configUpdates *prometheus.CounterVec // result: ok | rejected
	configLoaded  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_ratelimit_requests_total",
			Help: "ShouldRateLimit calls answered by the embedded rate-limit service, by outcome.",
		}, []string{"code"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swarmgate_ratelimit_request_duration_seconds",
			Help:    "Time to answer ShouldRateLimit, Redis round trips included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .02, .05, .1, .5},
		}),
		redisErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_ratelimit_redis_errors_total",
			Help: "Redis commands of the rate-limit service that failed (the call then answers an error).",
		}),
		configUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_ratelimit_config_updates_total",
			Help: "RateLimitConfig updates received over xDS, by result.",
		}, []string{"result"}),
		configLoaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "swarmgate_ratelimit_config_loaded",
			Help: "1 once a RateLimitConfig has been loaded over xDS.",
		}),
	}
	for _, c := range []string{codeOK, codeOverLimit, codeError, codeNotReady} {
		m.requests.WithLabelValues(c)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.redisErrors, m.configUpdates, m.configLoaded)
	}
	return m
}

const (
	codeOK        = "ok"
	codeOverLimit = "over_limit"
	codeError     = "error"
	codeNotReady  = "not_ready"
)
