package ledger

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	writes, duplicates, errors prometheus.Counter
	spilled, replayed, dropped prometheus.Counter
	buffered                   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	writes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swarmgate_ledger_writes_total",
		Help: "Ledger entries written to Redis, by result (written, duplicate: request id already counted).",
	}, []string{"result"})
	m := &metrics{
		writes:     writes.WithLabelValues("written"),
		duplicates: writes.WithLabelValues("duplicate"),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_ledger_write_errors_total",
			Help: "Failed Redis writes (direct or replay); the entries were buffered, not lost.",
		}),
		buffered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "swarmgate_ledger_buffered",
			Help: "Entries waiting in memory for Redis.",
		}),
		spilled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_ledger_spilled_total",
			Help: "Entries moved from the full buffer to the spill file.",
		}),
		replayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_ledger_replayed_total",
			Help: "Entries written by replay from the buffer or the spill file.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_ledger_dropped_total",
			Help: "Entries lost: buffer full without a usable spill file, or unreadable spill lines.",
		}),
	}
	if reg != nil {
		reg.MustRegister(writes, m.errors, m.buffered, m.spilled, m.replayed, m.dropped)
	}
	return m
}
