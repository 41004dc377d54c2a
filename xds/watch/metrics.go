package watch

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	reloads  prometheus.Counter
	rejected prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_config_watch_reloads_total", Help: "Config file versions loaded and applied.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_config_watch_rejected_total", Help: "Config file versions rejected (invalid or refused); the previous config stayed in force.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.reloads, m.rejected)
	}
	return m
}
