package telemetry

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// MetricBuildInfo is a constant 1 labelled with the running version.
const MetricBuildInfo = "swarmgate_build_info"

// NewRegistry returns the process's metric registry: Go runtime and process
// collectors plus swarmgate_build_info. Every package registers its
// families here; the admin server's /metrics gathers it.
func NewRegistry(version string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        MetricBuildInfo,
		Help:        "Always 1; labels say which swarmgate build runs.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	info.Set(1)
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info,
	)
	return reg
}
