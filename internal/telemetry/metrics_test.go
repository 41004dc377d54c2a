package telemetry

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func approx(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestMetricsScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, testConfig(t))

	// A scripted series of requests, as the data path would report them.
	script := []Completion{
		{Labels: Labels{"alpha", "m1", "b1"}, Status: 200, Latency: 2 * time.Second, TTFT: 500 * time.Millisecond,
			Tokens: Tokens{Input: 100, Output: 31}, Cost: 0.01},
		{Labels: Labels{"alpha", "m1", "b1"}, Status: 200, Latency: time.Second,
			Tokens: Tokens{Input: 50, Output: 10, CachedInput: 20, Reasoning: 4}, Cost: 0.002},
		{Labels: Labels{"beta", "m2", "b2"}, Status: 429, Latency: 100 * time.Millisecond},
		// A model name from the client that is not in the config.
		{Labels: Labels{"beta", "gpt-from-the-client", "b2"}, Status: 404, Latency: time.Millisecond},
		// Refused before authentication: nothing known.
		{Status: 401, Latency: time.Millisecond},
		// A stream that failed after its first token: TTFT yes, TPOT no.
		{Labels: Labels{"alpha", "m1", "b1"}, Status: 503, Latency: 400 * time.Millisecond, TTFT: 300 * time.Millisecond,
			Tokens: Tokens{Input: 10, Output: 5}},
		// A tenant removed from the config, and an invented status.
		{Labels: Labels{"gamma", "m2", "b9"}, Status: 999},
	}
	for _, c := range script {
		m.ObserveRequest(c)
	}
	for range 3 {
		m.ObservePhase(FilterRouter, PhaseRequestHeaders, time.Millisecond)
	}
	m.ObservePhase(FilterUpstream, PhaseResponseHeaders, 2*time.Millisecond)
	m.ObservePhase(FilterUpstream, Phase(200), time.Second) // dropped
	m.ObserveRateLimit("alpha", "m1", LimitTPM, DecisionLimited)
	m.ObserveRateLimit("alpha", "m1", LimitTPM, DecisionLimited)
	m.ObserveRateLimit("beta", "m2", LimitRPM, DecisionFailOpen)
	m.ObserveRateLimit("beta", "client-model", Limit("invented"), Decision("maybe"))

	fams := scrape(t, reg)

	t.Run("requests", func(t *testing.T) {
		cases := []struct {
			tenant, model, backend, status string
			want                           float64
		}{
			{"alpha", "m1", "b1", "200", 2},
			{"beta", "m2", "b2", "429", 1},
			{"beta", Other, "b2", "404", 1},
			{None, None, None, "401", 1},
			{"alpha", "m1", "b1", "503", 1},
			{Other, "m2", Other, Other, 1},
		}
		for _, c := range cases {
			s := series(t, fams, MetricRequests, map[string]string{"tenant": c.tenant, "model": c.model, "backend": c.backend, "status": c.status})
			if got := s.GetCounter().GetValue(); got != c.want {
				t.Errorf("requests %v: got %v, want %v", c, got, c.want)
			}
		}
		if n := seriesCount(fams, MetricRequests); n != len(cases) {
			t.Errorf("requests: %d series, want %d", n, len(cases))
		}
	})

	t.Run("duration", func(t *testing.T) {
		h := series(t, fams, MetricRequestDuration, map[string]string{"model": "m1", "backend": "b1"}).GetHistogram()
		if h.GetSampleCount() != 3 || !approx(h.GetSampleSum(), 3.4) {
			t.Errorf("duration m1/b1: count %d sum %v, want 3, 3.4", h.GetSampleCount(), h.GetSampleSum())
		}
		// The 999-status request had no latency: not observed.
		for _, s := range fams[MetricRequestDuration].GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "backend" && l.GetValue() == Other {
					t.Errorf("zero latency observed: %v", s)
				}
			}
		}
	})

	t.Run("ttft", func(t *testing.T) {
		h := series(t, fams, MetricTimeToFirstToken, map[string]string{"model": "m1", "backend": "b1"}).GetHistogram()
		if h.GetSampleCount() != 2 || !approx(h.GetSampleSum(), 0.8) {
			t.Errorf("ttft: count %d sum %v, want 2, 0.8", h.GetSampleCount(), h.GetSampleSum())
		}
		// Observed 0.5 and 0.3: buckets from le=0.5 up hold both, none below.
		for _, b := range h.GetBucket() {
			var want uint64
			switch {
			case b.GetUpperBound() >= 0.5:
				want = 2
			case b.GetUpperBound() >= 0.3:
				want = 1
			}
			if b.GetCumulativeCount() != want {
				t.Errorf("ttft bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
			}
		}
	})

	t.Run("tpot", func(t *testing.T) {
		h := series(t, fams, MetricTimePerOutputTok, map[string]string{"model": "m1", "backend": "b1"}).GetHistogram()
		// (2s - 0.5s) / (31 - 1) tokens = 50ms, from the one successful stream.
		if h.GetSampleCount() != 1 || !approx(h.GetSampleSum(), 0.05) {
			t.Errorf("tpot: count %d sum %v, want 1, 0.05", h.GetSampleCount(), h.GetSampleSum())
		}
	})

	t.Run("tokens", func(t *testing.T) {
		cases := []struct {
			kind string
			want float64
		}{{"input", 160}, {"output", 46}, {"cached_input", 20}, {"reasoning", 4}}
		for _, c := range cases {
			s := series(t, fams, MetricTokens, map[string]string{"tenant": "alpha", "model": "m1", "backend": "b1", "type": c.kind})
			if got := s.GetCounter().GetValue(); got != c.want {
				t.Errorf("tokens %s: got %v, want %v", c.kind, got, c.want)
			}
		}
		if n := seriesCount(fams, MetricTokens); n != len(cases) {
			t.Errorf("tokens: %d series, want %d (zero counts create none)", n, len(cases))
		}
	})

	t.Run("cost", func(t *testing.T) {
		s := series(t, fams, MetricCost, map[string]string{"tenant": "alpha", "model": "m1", "backend": "b1"})
		if got := s.GetCounter().GetValue(); !approx(got, 0.012) {
			t.Errorf("cost: got %v, want 0.012", got)
		}
	})

	t.Run("phase", func(t *testing.T) {
		h := series(t, fams, MetricPhaseDuration, map[string]string{"filter": "router", "phase": "request_headers"}).GetHistogram()
		if h.GetSampleCount() != 3 || !approx(h.GetSampleSum(), 0.003) {
			t.Errorf("router request_headers: count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
		}
		h = series(t, fams, MetricPhaseDuration, map[string]string{"filter": "upstream", "phase": "response_headers"}).GetHistogram()
		if h.GetSampleCount() != 1 || !approx(h.GetSampleSum(), 0.002) {
			t.Errorf("upstream response_headers: count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
		}
		var total uint64
		for _, s := range fams[MetricPhaseDuration].GetMetric() {
			total += s.GetHistogram().GetSampleCount()
		}
		if total != 4 {
			t.Errorf("phase observations: %d, want 4 (unknown phase dropped)", total)
		}
	})

	t.Run("ratelimit", func(t *testing.T) {
		cases := []struct {
			tenant, model, limit, decision string
			want                           float64
		}{
			{"alpha", "m1", "tpm", "limited", 2},
			{"beta", "m2", "rpm", "fail_open", 1},
			{"beta", Other, Other, Other, 1},
		}
		for _, c := range cases {
			s := series(t, fams, MetricRateLimitDecision, map[string]string{"tenant": c.tenant, "model": c.model, "limit": c.limit, "decision": c.decision})
			if got := s.GetCounter().GetValue(); got != c.want {
				t.Errorf("ratelimit %v: got %v", c, got)
			}
		}
	})
}

func TestMetricsSetConfig(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, nil) // nothing allowed yet
	m.ObserveRequest(Completion{Labels: Labels{"alpha", "m1", "b1"}, Status: 200})
	m.SetConfig(testConfig(t))
	m.ObserveRequest(Completion{Labels: Labels{"alpha", "m1", "b1"}, Status: 200})
	fams := scrape(t, reg)
	for _, want := range []map[string]string{
		{"tenant": Other, "model": Other, "backend": Other, "status": "200"},
		{"tenant": "alpha", "model": "m1", "backend": "b1", "status": "200"},
	} {
		if v := series(t, fams, MetricRequests, want).GetCounter().GetValue(); v != 1 {
			t.Errorf("%v: %v, want 1", want, v)
		}
	}
}

func TestMetricsNil(t *testing.T) {
	var m *Metrics
	m.ObserveRequest(Completion{Status: 200})
	m.ObservePhase(FilterRouter, PhaseRequestBody, time.Millisecond)
	m.ObserveRateLimit("a", "b", LimitRPM, DecisionAllowed)
	m.SetConfig(nil)
}

func TestMetricsUnregistered(t *testing.T) {
	// nil Registerer: usable, registered nowhere, so two can coexist.
	a, b := NewMetrics(nil, nil), NewMetrics(nil, nil)
	a.ObserveRequest(Completion{Status: 200})
	b.ObserveRequest(Completion{Status: 200})
}

func BenchmarkObserveRequest(b *testing.B) {
	m := NewMetrics(nil, testConfig(b))
	c := Completion{Labels: Labels{"alpha", "m1", "b1"}, Status: 200, Latency: 2 * time.Second, TTFT: 300 * time.Millisecond,
		Tokens: Tokens{Input: 100, Output: 31}, Cost: 0.01}
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveRequest(c)
	}
}

func BenchmarkObservePhase(b *testing.B) {
	m := NewMetrics(nil, nil)
	b.ReportAllocs()
	for b.Loop() {
		m.ObservePhase(FilterRouter, PhaseResponseBody, 150*time.Microsecond)
	}
}

// The per-(tenant, model, backend) children are resolved once: a steady
// stream of requests allocates nothing, and a series that was never used
// (no TTFT on a non-streamed request, no cost at zero) is not exposed.
func TestObserveRequestSteadyState(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, testConfig(t))
	c := Completion{Labels: Labels{"alpha", "m1", "b1"}, Status: 200, Latency: time.Second, Tokens: Tokens{Input: 10, Output: 3}}
	m.ObserveRequest(c)
	if a := testing.AllocsPerRun(100, func() { m.ObserveRequest(c) }); a != 0 {
		t.Errorf("ObserveRequest allocates %v per call in steady state", a)
	}
	fams := scrape(t, reg)
	for _, name := range []string{MetricTimeToFirstToken, MetricCost} {
		if f, ok := fams[name]; ok && len(f.GetMetric()) > 0 {
			t.Errorf("%s exposed without an observation: %v", name, f.GetMetric())
		}
	}
	if v := series(t, fams, MetricRequests, map[string]string{"tenant": "alpha", "model": "m1", "backend": "b1", "status": "200"}).GetCounter().GetValue(); v != 102 {
		t.Errorf("requests = %v, want 102", v)
	}
}
