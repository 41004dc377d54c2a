package admission

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the queue's Prometheus series (swarmgate_admission_*).
type Metrics struct {
	depth     *prometheus.GaugeVec
	wait      *prometheus.HistogramVec
	afterWait *prometheus.CounterVec
	refusals  *prometheus.CounterVec
	paced     *prometheus.CounterVec
	orderErrs prometheus.Counter
	leaveRetr prometheus.Counter
}

// NewMetrics creates the series and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "swarmgate_admission_queue_depth",
			Help: "Requests waiting for capacity in this replica."}, []string{"tenant", "class"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "swarmgate_admission_wait_seconds",
			Help:    "Time admitted requests waited in the queue.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"tenant", "class"}),
		afterWait: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarmgate_admission_admitted_after_wait_total",
			Help: "Requests admitted after waiting in the queue."}, []string{"tenant", "class"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarmgate_admission_refused_total",
			Help: "Requests the queue did not admit, by reason (timeout, too_long, queue_full, cancelled, order_down)."},
			[]string{"tenant", "class", "reason"}),
		paced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarmgate_admission_paced_total",
			Help: "Admitted requests held back by a backend's pace (its keys' request rate) at some point."}, []string{"tenant", "class"}),
		orderErrs: prometheus.NewCounter(prometheus.CounterOpts{Name: "swarmgate_admission_order_errors_total",
			Help: "Calls to the shared (Redis) admission order that failed; failure_modes.admission_order decides what follows."}),
		leaveRetr: prometheus.NewCounter(prometheus.CounterOpts{Name: "swarmgate_admission_leave_retries_total",
			Help: "Tickets whose leave from the shared order failed and was retried in the background."}),
	}
	if reg != nil {
		reg.MustRegister(m.depth, m.wait, m.afterWait, m.refusals, m.paced, m.orderErrs, m.leaveRetr)
	}
	return m
}

func (m *Metrics) waiting(r Request, d float64) {
	if m != nil {
		m.depth.WithLabelValues(r.Tenant, r.ClassName).Add(d)
	}
}

func (m *Metrics) admitted(r Request, waited time.Duration, paced bool) {
	if m == nil {
		return
	}
	m.wait.WithLabelValues(r.Tenant, r.ClassName).Observe(waited.Seconds())
	m.afterWait.WithLabelValues(r.Tenant, r.ClassName).Inc()
	if paced {
		m.paced.WithLabelValues(r.Tenant, r.ClassName).Inc()
	}
}

func (m *Metrics) refused(r Request, why Reason) {
	if m != nil {
		m.refusals.WithLabelValues(r.Tenant, r.ClassName, string(why)).Inc()
	}
}

func (m *Metrics) orderError() {
	if m != nil {
		m.orderErrs.Inc()
	}
}

func (m *Metrics) leaveRetried() {
	if m != nil {
		m.leaveRetr.Inc()
	}
}
