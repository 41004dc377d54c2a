package budget

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	spend, limit  *prometheus.GaugeVec
	alerts        *prometheus.CounterVec
	keyAlerts     *prometheus.CounterVec
	refused       *prometheus.CounterVec
	webhookErrors prometheus.Counter
	alertsDropped prometheus.Counter
	storeFailures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		spend: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swarmgate_budget_spend",
			Help: "Tenant spend this month in the configured currency, as last seen by this replica.",
		}, []string{"tenant"}),
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swarmgate_budget_limit",
			Help: "Tenant monthly budget in the configured currency.",
		}, []string{"tenant"}),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_budget_alerts_total",
			Help: "Budget threshold alerts fired by this replica (each fires once across replicas).",
		}, []string{"tenant", "threshold"}),
		keyAlerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_budget_key_alerts_total",
			Help: "Sub-key budget threshold alerts fired by this replica (each fires once across replicas), by the key's tenant.",
		}, []string{"tenant", "threshold"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_budget_refused_total",
			Help: "Requests refused at the hard cap by Check.",
		}, []string{"tenant"}),
		webhookErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_budget_webhook_failures_total",
			Help: "Alert webhook posts that failed after all retries.",
		}),
		alertsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "swarmgate_budget_alerts_dropped_total",
			Help: "Alert deliveries dropped because the webhook queue was full.",
		}),
		storeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swarmgate_budget_store_failures_total",
			Help: "Budget checks that could not reach Redis, by the failure mode applied.",
		}, []string{"mode"}),
	}
	if reg != nil {
		reg.MustRegister(m.spend, m.limit, m.alerts, m.keyAlerts, m.refused, m.webhookErrors, m.alertsDropped, m.storeFailures)
	}
	return m
}
