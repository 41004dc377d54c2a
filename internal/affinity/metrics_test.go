package affinity

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// TestMetrics: drops, writes, failures and lookups by result are exported,
// so a queue that drops owners (ids that will get 400s) can be alerted on.
func TestMetrics(t *testing.T) {
	rs := redistest.Start(t)
	reg := prometheus.NewRegistry()
	s := New(rs.Client(), Options{Prefix: "t:", Queue: 2, Registerer: reg, ReadTimeout: 200 * time.Millisecond})
	for range 3 {
		s.Remember("resp_1", Owner{Backend: "b", Key: "k", Tenant: "t"}, time.Minute)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	eventually(t, "written", func() bool { return s.written.Load() == 2 })
	if _, err := s.Owner(context.Background(), "resp_1"); err != nil {
		t.Fatal(err)
	}
	_, _ = s.Owner(context.Background(), "resp_unknown")
	cancel()
	<-done
	rs.Stop()
	s.Remember("resp_2", Owner{Backend: "b", Key: "k", Tenant: "t"}, time.Minute)
	s.write(context.Background(), s.drain(nil))
	_, _ = s.Owner(context.Background(), "resp_2")

	for name, want := range map[string]float64{"swarmgate_affinity_records_dropped_total": 1,
		"swarmgate_affinity_records_written_total": 2, "swarmgate_affinity_write_failures_total": 1} {
		if got := gathered(t, reg, name, ""); got != want {
			t.Errorf("%s = %g, want %g", name, got, want)
		}
	}
	for result, n := range map[string]float64{"not_found": 1, "error": 1, "found": 1} {
		if got := gathered(t, reg, "swarmgate_affinity_lookups_total", result); got != n {
			t.Errorf("lookups %s = %g, want %g", result, got, n)
		}
	}
}

// gathered is a counter's value (the series with label result, when given).
func gathered(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if result == "" || (len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == result) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
