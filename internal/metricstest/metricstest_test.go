package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"backend", "verdict"})
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"}, []string{"filter", "phase"})
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g_state", Help: "g"}, []string{"key"})
	reg.MustRegister(c, h, g)
	g.WithLabelValues("k1").Set(1)
	g.WithLabelValues("k2").Set(2)
	c.WithLabelValues("a", "reset").Add(2)
	c.WithLabelValues("a", "cancelled").Add(5)
	c.WithLabelValues("b", "reset").Add(7)
	for range 3 {
		h.WithLabelValues("upstream", "request_body").Observe(0.1)
	}
	h.WithLabelValues("router", "request_body").Observe(0.1)
	tests := []struct {
		name   string
		family string
		want   map[string]string
		sum    float64
	}{
		{"all series", "c_total", nil, 14},
		{"one label", "c_total", map[string]string{"verdict": "reset"}, 9},
		{"two labels", "c_total", map[string]string{"backend": "a", "verdict": "reset"}, 2},
		{"no series matches", "c_total", map[string]string{"backend": "z"}, 0},
		{"a label the family lacks", "c_total", map[string]string{"phase": "x"}, 0},
		{"histogram sample count", "h_seconds", map[string]string{"filter": "upstream", "phase": "request_body"}, 3},
		{"gauge value", "g_state", map[string]string{"key": "k2"}, 2},
		{"unknown family", "nope", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Sum(reg, tc.family, tc.want)
			if err != nil || got != tc.sum {
				t.Errorf("Sum(%s, %v) = %v, %v; want %v", tc.family, tc.want, got, err, tc.sum)
			}
		})
	}
}
