package loadgen

import (
	"fmt"
	"strings"
)

// Table is a Markdown table of results; each non-baseline row also shows
// its ratios against the baseline run of the same scenario kind and stream
// count (throughput ratio, message p99 ratio, server CPU per request).
func Table(results []*Result) string {
	base := map[string]*Result{}
	key := func(r *Result) string { return fmt.Sprintf("%s/%d/%.0f", r.Scenario.Kind, r.Streams, r.RateTarget) }
	for _, r := range results {
		if r.Label == TargetBaseline {
			base[key(r)] = r
		}
	}
	var b strings.Builder
	b.WriteString("| target | kind | streams | req/s | msg p50 / p99 / p99.9 µs | req p50 / p99 µs | server CPU µs/req | server peak RSS MB | errors | req/s ratio | msg p99 ratio |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		ratio, p99 := "", ""
		if bl := base[key(r)]; bl != nil && bl != r && bl.RPS > 0 && bl.Message.P99US > 0 {
			ratio = fmt.Sprintf("%.2f", r.RPS/bl.RPS)
			p99 = fmt.Sprintf("%.2f", r.Message.P99US/bl.Message.P99US)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %.0f | %.0f / %.0f / %.0f | %.0f / %.0f | %.0f | %.0f | %d | %s | %s |\n",
			r.Label, r.Scenario.Kind, r.Streams, r.RPS, r.Message.P50US, r.Message.P99US, r.Message.P999US,
			r.Request.P50US, r.Request.P99US, r.Server.CPUPerRequestUS, r.Server.PeakRSSMB, r.Errors, ratio, p99)
	}
	return b.String()
}
