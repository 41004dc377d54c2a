package admin

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/telemetry"
)

// /metrics serves the process registry: data-path families recorded through
// telemetry.Metrics come out of the admin port with the recorded values.
func TestMetricsEndpointServesTelemetry(t *testing.T) {
	cfg := testConfig(t)
	reg := telemetry.NewRegistry("test-1")
	m := telemetry.NewMetrics(reg, cfg)
	for range 3 {
		m.ObserveRequest(telemetry.Completion{Labels: telemetry.Labels{Tenant: "team-red", Model: "gpt-4o-mini", Backend: "relay-a"},
			Status: 200, Latency: time.Second, TTFT: 200 * time.Millisecond, Tokens: telemetry.Tokens{Input: 10, Output: 9}, Cost: 0.5})
	}
	m.ObserveRequest(telemetry.Completion{Labels: telemetry.Labels{Tenant: "team-blue", Model: "invented-by-client"}, Status: 404})
	ts := startServer(t, Options{Gatherer: reg, Config: func() *config.Config { return cfg }})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		for _, s := range fams[name].GetMetric() {
			match := len(s.GetLabel()) == len(labels)
			for _, l := range s.GetLabel() {
				match = match && labels[l.GetName()] == l.GetValue()
			}
			if match {
				if s.GetCounter() != nil {
					return s.GetCounter().GetValue()
				}
				return float64(s.GetHistogram().GetSampleCount())
			}
		}
		t.Fatalf("%s%v not served", name, labels)
		return 0
	}
	cases := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{telemetry.MetricRequests, map[string]string{"tenant": "team-red", "model": "gpt-4o-mini", "backend": "relay-a", "status": "200"}, 3},
		{telemetry.MetricRequests, map[string]string{"tenant": "team-blue", "model": telemetry.Other, "backend": telemetry.None, "status": "404"}, 1},
		{telemetry.MetricCost, map[string]string{"tenant": "team-red", "model": "gpt-4o-mini", "backend": "relay-a"}, 1.5},
		{telemetry.MetricTokens, map[string]string{"tenant": "team-red", "model": "gpt-4o-mini", "backend": "relay-a", "type": "output"}, 27},
		{telemetry.MetricTimeToFirstToken, map[string]string{"model": "gpt-4o-mini", "backend": "relay-a"}, 3},
		{telemetry.MetricTimePerOutputTok, map[string]string{"model": "gpt-4o-mini", "backend": "relay-a"}, 3},
	}
	for _, c := range cases {
		if got := value(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("runtime collectors missing")
	}
}
