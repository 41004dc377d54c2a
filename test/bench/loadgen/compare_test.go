package loadgen

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

func TestCompare(t *testing.T) {
	base := Endpoint{Label: TargetBaseline, Addr: startTarget(t, TargetBaseline, TargetOptions{})}
	sg := Endpoint{Label: TargetSwarmgate, Addr: startTarget(t, TargetSwarmgate, TargetOptions{})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const pairs = 3
	c, err := Compare(ctx, CompareOptions{Baseline: base, Target: sg, Pairs: pairs,
		Load: Options{Scenario: Scenario{Kind: "json"}, Streams: 4, Warmup: 20 * time.Millisecond,
			Duration: 15 * time.Second, Requests: smokeRequests / 2}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pairs) != pairs || c.RPS.N != pairs || c.Point != "json/4" || c.Baseline != TargetBaseline || c.Target != TargetSwarmgate {
		t.Fatalf("comparison %q %s vs %s with %d pairs, spread n=%d", c.Point, c.Target, c.Baseline, len(c.Pairs), c.RPS.N)
	}
	for i, p := range c.Pairs {
		if p.Baseline.Label != TargetBaseline || p.Target.Label != TargetSwarmgate {
			t.Fatalf("pair %d: labels %s, %s", i, p.Baseline.Label, p.Target.Label)
		}
		// The order swaps every pair, so neither side always runs first.
		targetFirst := p.Target.Started.Before(p.Baseline.Started)
		if targetFirst != (i%2 == 1) {
			t.Errorf("pair %d: target first = %v", i, targetFirst)
		}
		if p.Baseline.Work != (Work{}) || p.Target.Work.Routed != p.Target.Requests {
			t.Errorf("pair %d: baseline work %+v; target routed %d of %d", i, p.Baseline.Work, p.Target.Work.Routed, p.Target.Requests)
		}
		if want := p.Target.RPS / p.Baseline.RPS; math.Abs(p.RPS-want) > 0.001 {
			t.Errorf("pair %d: rps ratio %.3f, slices say %.3f", i, p.RPS, want)
		}
		if want := p.Baseline.Server.CPUPerRequestUS / p.Target.Server.CPUPerRequestUS; math.Abs(p.CPU-want) > 0.001 {
			t.Errorf("pair %d: cpu ratio %.3f, slices say %.3f", i, p.CPU, want)
		}
	}
	if !(c.RPS.Min <= c.RPS.Q1 && c.RPS.Q1 <= c.RPS.Median && c.RPS.Median <= c.RPS.Q3 && c.RPS.Q3 <= c.RPS.Max) || c.PooledRPS <= 0 {
		t.Errorf("rps spread out of order: %+v, pooled %.3f", c.RPS, c.PooledRPS)
	}
	if m := c.MedianPair(); m.RPS != c.RPS.Median {
		t.Errorf("median pair ratio %.3f, median %.3f", m.RPS, c.RPS.Median)
	}
	if n := c.AtLeast(0); n != pairs {
		t.Errorf("AtLeast(0) = %d", n)
	}
	table := ComparisonTable([]*Comparison{c}, 0.8, 1.5)
	if !strings.Contains(table, "| json/4 | 3 |") {
		t.Errorf("table:\n%s", table)
	}
}

func TestSpread(t *testing.T) {
	tests := []struct {
		in   []float64
		want Spread
	}{
		{nil, Spread{}},
		{[]float64{0.9}, Spread{N: 1, Median: 0.9, Q1: 0.9, Q3: 0.9, Min: 0.9, Max: 0.9}},
		{[]float64{0.8, 0.6}, Spread{N: 2, Median: 0.7, Q1: 0.65, Q3: 0.75, Min: 0.6, Max: 0.8}},
		{[]float64{5, 1, 4, 2, 3}, Spread{N: 5, Median: 3, Q1: 2, Q3: 4, Min: 1, Max: 5}},
		{[]float64{1, 2, 3, 4}, Spread{N: 4, Median: 2.5, Q1: 1.75, Q3: 3.25, Min: 1, Max: 4}},
	}
	for _, tc := range tests {
		if got := spread(tc.in); got != tc.want {
			t.Errorf("spread(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestAtLeastAndP99AtMost(t *testing.T) {
	c := &Comparison{Pairs: []Pair{{RPS: 0.79, P99: 1.6}, {RPS: 0.8, P99: 1.5}, {RPS: 0.95, P99: 1.1}}}
	if n := c.AtLeast(0.8); n != 2 {
		t.Errorf("AtLeast(0.8) = %d, want 2 (the bound counts)", n)
	}
	if n := c.P99AtMost(1.5); n != 2 {
		t.Errorf("P99AtMost(1.5) = %d, want 2 (the bound counts)", n)
	}
	if m := c.MedianPair(); m.RPS != 0.8 {
		t.Errorf("median pair %+v", m)
	}
}
