package loadgen

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// WriteSVG draws the latency percentiles of results (one line each) in two
// panels, per ext_proc message and per request, on log-scaled axes. It is
// hand-written SVG: no dependencies, readable in a browser or on GitHub.
func WriteSVG(w io.Writer, title string, results []*Result) error {
	const (
		width  = 960
		panelW = 400
		panelH = 280
		top    = 60
	)
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}
	qs := []string{"p50", "p90", "p99", "p99.9"}
	pick := func(s Summary) []float64 { return []float64{s.P50US, s.P90US, s.P99US, s.P999US} }

	height := top + panelH + 40 + 18*len(results) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="24" text-anchor="middle" font-size="16">%s</text>`+"\n", width/2, html.EscapeString(title))

	panels := []struct {
		name string
		get  func(*Result) Summary
	}{
		{"latency per ext_proc message (log scale)", func(r *Result) Summary { return r.Message }},
		{"latency per request (log scale)", func(r *Result) Summary { return r.Request }},
	}
	for pi, p := range panels {
		left := 70 + pi*(panelW+80)
		lo, hi := math.Inf(1), 0.0
		for _, r := range results {
			for _, v := range pick(p.get(r)) {
				if v > 0 {
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
		}
		if hi == 0 {
			lo, hi = 1, 10
		}
		// Whole decades around the data.
		dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if dhi == dlo {
			dhi++
		}
		y := func(v float64) float64 {
			return float64(top+panelH) - (math.Log10(v)-dlo)/(dhi-dlo)*panelH
		}
		x := func(i int) float64 { return float64(left) + 30 + float64(i)*float64(panelW-60)/float64(len(qs)-1) }
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", left+panelW/2, top-12, p.name)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", left, top, panelW, panelH)
		for d := dlo; d <= dhi; d++ {
			for _, m := range []float64{1, 2, 5} {
				v := m * math.Pow(10, d)
				if math.Log10(v) > dhi+1e-9 {
					continue
				}
				yy := y(v)
				stroke := "#eee"
				if m == 1 {
					stroke = "#ccc"
				}
				fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s"/>`+"\n", left, left+panelW, yy, yy, stroke)
				fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", left-4, yy+4, axisLabel(v))
			}
		}
		for i, q := range qs {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", x(i), top+panelH+16, q)
		}
		for ri, r := range results {
			c := colors[ri%len(colors)]
			var pts []string
			for i, v := range pick(p.get(r)) {
				if v <= 0 {
					continue
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s %s %.1f µs</title></circle>`+"\n",
					x(i), y(v), c, html.EscapeString(seriesName(r)), qs[i], v)
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), c)
		}
	}
	ly := top + panelH + 40
	for ri, r := range results {
		c := colors[ri%len(colors)]
		row := ly + ri*18
		col := 70
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="4" fill="%s"/>`+"\n", col, row-5, c)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s: %.0f req/s, server CPU %.0f µs/req, peak RSS %.0f MB</text>`+"\n",
			col+20, row, html.EscapeString(seriesName(r)), r.RPS, r.Server.CPUPerRequestUS, r.Server.PeakRSSMB)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func seriesName(r *Result) string {
	return fmt.Sprintf("%s %s %d streams", r.Label, r.Scenario.Kind, r.Streams)
}

func axisLabel(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gs", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gms", v/1e3)
	}
	return fmt.Sprintf("%gµs", v)
}
