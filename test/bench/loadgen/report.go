package loadgen

import (
	"fmt"
	"slices"
	"strings"
)

// Table is a Markdown table of results, one row per target and load point
// (scenario kind, streams, rate, chunk interval) with the median of its
// runs. Rows of other targets show their ratios against the baseline of
// the same point: throughput, per-message p99, and server CPU per request
// (the throughput ratio the server alone would reach if it were the
// bottleneck: baseline CPU/request over this CPU/request).
func Table(results []*Result) string {
	type row struct {
		label, point string
		rs           []*Result
	}
	var rows []*row
	find := func(label, point string) *row {
		for _, r := range rows {
			if r.label == label && r.point == point {
				return r
			}
		}
		r := &row{label: label, point: point}
		rows = append(rows, r)
		return r
	}
	for _, r := range results {
		x := find(r.Label, pointName(r))
		x.rs = append(x.rs, r)
	}
	// Group by point, the baseline first.
	slices.SortStableFunc(rows, func(a, b *row) int {
		if a.point != b.point {
			return strings.Compare(a.point, b.point)
		}
		return strings.Compare(strings.Replace(a.label, TargetBaseline, "", 1), strings.Replace(b.label, TargetBaseline, "", 1))
	})
	lookup := func(label, point string) *row {
		for _, r := range rows {
			if r.label == label && r.point == point {
				return r
			}
		}
		return nil
	}
	med := func(rs []*Result, f func(*Result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	rps := func(r *Result) float64 { return r.RPS }
	p50 := func(r *Result) float64 { return r.Message.P50US }
	p99 := func(r *Result) float64 { return r.Message.P99US }
	p999 := func(r *Result) float64 { return r.Message.P999US }
	rq99 := func(r *Result) float64 { return r.Request.P99US }
	cpu := func(r *Result) float64 { return r.Server.CPUPerRequestUS }
	rss := func(r *Result) float64 { return r.Server.PeakRSSMB }
	inflight := func(r *Result) float64 { return float64(r.PeakInFlight) }

	var b strings.Builder
	b.WriteString("| target | point | runs | req/s | msg p50 / p99 / p99.9 µs | req p99 ms | server CPU µs/req | peak RSS MB | peak in flight | errors | req/s ratio | msg p99 ratio | CPU ratio |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range rows {
		var errs uint64
		for _, r := range x.rs {
			errs += r.Errors
		}
		ratio, p99r, cpur := "", "", ""
		if x.label != TargetBaseline {
			if bl := lookup(TargetBaseline, x.point); bl != nil {
				ratio = fmt.Sprintf("%.2f", med(x.rs, rps)/med(bl.rs, rps))
				p99r = fmt.Sprintf("%.2f", med(x.rs, p99)/med(bl.rs, p99))
				cpur = fmt.Sprintf("%.2f", med(bl.rs, cpu)/med(x.rs, cpu))
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %.0f | %.0f / %.0f / %.0f | %.1f | %.0f | %.0f | %.0f | %d | %s | %s | %s |\n",
			x.label, x.point, len(x.rs), med(x.rs, rps), med(x.rs, p50), med(x.rs, p99), med(x.rs, p999),
			med(x.rs, rq99)/1000, med(x.rs, cpu), med(x.rs, rss), med(x.rs, inflight), errs, ratio, p99r, cpur)
	}
	return b.String()
}
