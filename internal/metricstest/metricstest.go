// Package metricstest reads Prometheus registries in tests.
package metricstest

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Sum adds up, over the series of the family name whose labels include
// every pair of want, the counter and gauge values and the histogram
// sample counts (how many observations, e.g. messages of one ext_proc
// phase).
func Sum(g prometheus.Gatherer, name string, want map[string]string) (float64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, fmt.Errorf("metricstest: gather: %w", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			matched := 0
			for _, lp := range m.GetLabel() {
				v, ok := want[lp.GetName()]
				if !ok {
					continue
				}
				if v != lp.GetValue() {
					continue series
				}
				matched++
			}
			if matched < len(want) {
				continue // a wanted label the series does not have
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, nil
}
