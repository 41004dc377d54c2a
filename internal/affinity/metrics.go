package affinity

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// register exports the store's counters. Records dropped by a full queue
// or a failed write make their response ids unknown (a follow-up gets a
// 400), so operators alert on them; lookups by result show how often
// clients name ids the gateway does not hold.
func (s *Store) register(reg prometheus.Registerer) {
	s.lookups = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarmgate_affinity_lookups_total",
		Help: "previous_response_id lookups, by result (found, not_found, error)."}, []string{"result"})
	cs := []prometheus.Collector{
		s.lookups,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "swarmgate_affinity_records_written_total",
			Help: "Response owners written to Redis."}, func() float64 { return float64(s.written.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "swarmgate_affinity_records_dropped_total",
			Help: "Response owners dropped because the write queue was full (their ids become unknown)."},
			func() float64 { return float64(s.dropped.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "swarmgate_affinity_write_failures_total",
			Help: "Response owners whose Redis write failed (their ids become unknown)."},
			func() float64 { return float64(s.failed.Load()) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue // a reload's new store: the first one's series stay
			}
			s.log.Warn("affinity: registering metrics", "err", err)
		}
	}
}

func (s *Store) lookup(result string) {
	if s.lookups != nil {
		s.lookups.WithLabelValues(result).Inc()
	}
}
