package loadgen

import (
	"context"
	"fmt"
	"google.golang.org/grpc/credentials"
	"slices"
	"strings"
)

// Endpoint is a running ext_proc server to compare.
type Endpoint struct {
	Label string
	Addr  string
	// PID is the server's process; 0 means this process (in-process
	// servers: CPU figures then include the load generator).
	PID int
	// Creds dial the endpoint; nil is plaintext.
	Creds credentials.TransportCredentials
}

// CompareOptions configure Compare. Load describes one slice (scenario,
// streams, rate, warm-up and measured window); its Addr, Label and
// ServerPID are taken from the endpoints.
type CompareOptions struct {
	Baseline, Target Endpoint
	Load             Options
	// Pairs is how many back-to-back (baseline, target) slices to run.
	Pairs int
}

// Pair is one baseline slice and the target slice next to it, and the
// target's ratios against it.
type Pair struct {
	Baseline *Result `json:"baseline"`
	Target   *Result `json:"target"`
	// RPS is target req/s over baseline req/s; P99 is target message p99
	// over baseline's; CPU is baseline server CPU per request over the
	// target's (the throughput ratio a server bound by its own CPU would
	// reach).
	RPS float64 `json:"rps_ratio"`
	P99 float64 `json:"msg_p99_ratio"`
	CPU float64 `json:"cpu_ratio"`
}

// Spread summarises one ratio over the pairs.
type Spread struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Q1     float64 `json:"q1"`
	Q3     float64 `json:"q3"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Comparison is the outcome of Compare.
type Comparison struct {
	Point    string `json:"point"`
	Baseline string `json:"baseline"`
	Target   string `json:"target"`
	Pairs    []Pair `json:"pairs"`
	RPS      Spread `json:"rps_ratio"`
	P99      Spread `json:"msg_p99_ratio"`
	CPU      Spread `json:"cpu_ratio"`
	// PooledRPS is the target's requests over its measured seconds, all
	// slices together, over the baseline's.
	PooledRPS float64 `json:"pooled_rps_ratio"`
}

// Compare drives two running servers in alternating short slices and
// reports the target's ratios per pair of neighbouring slices.
//
// On a shared VM the speed of the machine drifts by tens of percent
// within minutes; a ratio of two long runs taken minutes apart measures
// that drift as much as the servers. Slices of a few seconds, run back to
// back with the order swapped every pair (baseline first, then target
// first), put both servers under the same conditions, and many pairs give
// a distribution instead of one number. Both servers stay up (and warm)
// for the whole comparison; each slice opens its own connections and
// warms them up before measuring.
func Compare(ctx context.Context, o CompareOptions) (*Comparison, error) {
	if o.Pairs <= 0 {
		o.Pairs = 10
	}
	c := &Comparison{Baseline: o.Baseline.Label, Target: o.Target.Label}
	run := func(e Endpoint) (*Result, error) {
		opts := o.Load
		opts.Addr, opts.Label, opts.ServerPID, opts.Creds = e.Addr, e.Label, e.PID, e.Creds
		r, err := Run(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("loadgen: compare: %s: %w", e.Label, err)
		}
		return r, nil
	}
	for i := range o.Pairs {
		var p Pair
		var err error
		if i%2 == 0 {
			if p.Baseline, err = run(o.Baseline); err == nil {
				p.Target, err = run(o.Target)
			}
		} else {
			if p.Target, err = run(o.Target); err == nil {
				p.Baseline, err = run(o.Baseline)
			}
		}
		if err != nil {
			return nil, err
		}
		p.RPS = ratio(p.Target.RPS, p.Baseline.RPS)
		p.P99 = ratio(p.Target.Message.P99US, p.Baseline.Message.P99US)
		p.CPU = ratio(p.Baseline.Server.CPUPerRequestUS, p.Target.Server.CPUPerRequestUS)
		c.Pairs = append(c.Pairs, p)
	}
	c.Point = pointName(c.Pairs[0].Baseline)
	c.summarize()
	return c, nil
}

func (c *Comparison) summarize() {
	var rps, p99, cpu []float64
	var bReq, tReq uint64
	var bSec, tSec float64
	for _, p := range c.Pairs {
		rps = append(rps, p.RPS)
		p99 = append(p99, p.P99)
		cpu = append(cpu, p.CPU)
		bReq += p.Baseline.Requests
		tReq += p.Target.Requests
		bSec += p.Baseline.Seconds
		tSec += p.Target.Seconds
	}
	c.RPS, c.P99, c.CPU = spread(rps), spread(p99), spread(cpu)
	if bSec > 0 && tSec > 0 {
		c.PooledRPS = ratio(float64(tReq)/tSec, float64(bReq)/bSec)
	}
}

// AtLeast counts the pairs whose req/s ratio is at least x.
func (c *Comparison) AtLeast(x float64) int {
	n := 0
	for _, p := range c.Pairs {
		if p.RPS >= x {
			n++
		}
	}
	return n
}

// P99AtMost counts the pairs whose message p99 ratio is at most x.
func (c *Comparison) P99AtMost(x float64) int {
	n := 0
	for _, p := range c.Pairs {
		if p.P99 <= x {
			n++
		}
	}
	return n
}

// MedianPair is the pair whose req/s ratio is the median (the lower one of
// the two middle pairs for an even count): a representative pair to chart.
func (c *Comparison) MedianPair() Pair {
	ps := slices.Clone(c.Pairs)
	slices.SortFunc(ps, func(a, b Pair) int {
		switch {
		case a.RPS < b.RPS:
			return -1
		case a.RPS > b.RPS:
			return 1
		}
		return 0
	})
	return ps[(len(ps)-1)/2]
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round3(a / b)
}

// spread is the median, quartiles and range of v (quartiles interpolated
// between order statistics, as most tools do).
func spread(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	q := func(p float64) float64 {
		x := p * float64(len(s)-1)
		i := int(x)
		if i+1 >= len(s) {
			return s[len(s)-1]
		}
		return round3(s[i] + (x-float64(i))*(s[i+1]-s[i]))
	}
	return Spread{N: len(s), Median: q(0.5), Q1: q(0.25), Q3: q(0.75), Min: s[0], Max: s[len(s)-1]}
}

// pointName names a load point: kind/streams, then rate, chunk pacing and
// renaming when set.
func pointName(r *Result) string {
	p := fmt.Sprintf("%s/%d", r.Scenario.Kind, r.Streams)
	if r.RateTarget > 0 {
		p += fmt.Sprintf("/rate %.0f", r.RateTarget)
	}
	if r.ChunkIntervalMS > 0 {
		p += fmt.Sprintf("/%.0f ms chunks", r.ChunkIntervalMS)
	}
	if r.Scenario.RenameModel {
		p += "/renamed"
	}
	return p
}

// ComparisonTable is a Markdown table of comparisons, one row per point:
// the spread of each ratio over the pairs, and how many pairs met the
// given throughput and p99 targets.
func ComparisonTable(cs []*Comparison, minRPS, maxP99 float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| point | pairs | req/s ratio: median [q1–q3] (min–max) | pairs ≥ %.2f | pooled req/s ratio | msg p99 ratio: median [q1–q3] (max) | pairs ≤ %.2f | CPU ratio: median [q1–q3] |\n", minRPS, maxP99)
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, c := range cs {
		fmt.Fprintf(&b, "| %s | %d | **%.2f** [%.2f–%.2f] (%.2f–%.2f) | %d of %d | %.2f | **%.2f** [%.2f–%.2f] (%.2f) | %d of %d | %.2f [%.2f–%.2f] |\n",
			c.Point, len(c.Pairs), c.RPS.Median, c.RPS.Q1, c.RPS.Q3, c.RPS.Min, c.RPS.Max, c.AtLeast(minRPS), len(c.Pairs), c.PooledRPS,
			c.P99.Median, c.P99.Q1, c.P99.Q3, c.P99.Max, c.P99AtMost(maxP99), len(c.Pairs), c.CPU.Median, c.CPU.Q1, c.CPU.Q3)
	}
	return b.String()
}
