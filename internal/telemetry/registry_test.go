package telemetry

import (
	"runtime"
	"testing"
)

func TestNewRegistry(t *testing.T) {
	reg := NewRegistry("v1.2.3")
	NewMetrics(reg, nil) // the data-path families register beside the runtime ones
	NewRedisMetrics(reg)
	fams := scrape(t, reg)
	if v := series(t, fams, MetricBuildInfo, map[string]string{"version": "v1.2.3", "goversion": runtime.Version()}).GetGauge().GetValue(); v != 1 {
		t.Errorf("build info = %v", v)
	}
	for _, n := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := fams[n]; !ok {
			t.Errorf("%s not exported", n)
		}
	}
}
