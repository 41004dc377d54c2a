package loadgen

import (
	"encoding/xml"
	"strings"
	"testing"
)

func TestWriteSVGIsWellFormed(t *testing.T) {
	rs := []*Result{
		{Label: "baseline", Streams: 64, Scenario: Scenario{Kind: "sse"}, RPS: 1000,
			Message: Summary{P50US: 80, P90US: 150, P99US: 400, P999US: 900}, Request: Summary{P50US: 2000, P90US: 3000, P99US: 6000, P999US: 9000}},
		{Label: "swarm<gate>", Streams: 64, Scenario: Scenario{Kind: "sse"}, RPS: 900,
			Message: Summary{P50US: 90, P90US: 170, P99US: 450, P999US: 1200}, Request: Summary{P50US: 2200, P90US: 3300, P99US: 7000, P999US: 12000}},
	}
	var b strings.Builder
	if err := WriteSVG(&b, "a & b", rs); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(b.String()))
	lines := 0
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines != 2*len(rs) {
		t.Errorf("%d polylines, want %d (two panels)", lines, 2*len(rs))
	}
}

func TestTableRatiosAgainstBaselineOfSamePoint(t *testing.T) {
	mk := func(label string, streams int, rps, p99, cpu float64) *Result {
		return &Result{Label: label, Streams: streams, Scenario: Scenario{Kind: "sse"}, RPS: rps,
			Message: Summary{P99US: p99}, Server: Proc{CPUPerRequestUS: cpu}}
	}
	tab := Table([]*Result{
		mk(TargetBaseline, 64, 1000, 100, 400), mk(TargetSwarmgate, 64, 900, 120, 500),
		mk(TargetBaseline, 64, 1200, 80, 400), mk(TargetSwarmgate, 64, 700, 160, 500),
		mk(TargetSwarmgate, 1000, 500, 100, 600), // no baseline: no ratio
	})
	// Medians: baseline 1100 req/s, p99 90; swarmgate 800, 140.
	want := "| swarmgate | sse/64 | 2 | 800 | 0 / 140 / 0 | 0.0 | 500 | 0 | 0 | 0 | 0.73 | 1.56 | 0.80 |"
	if !strings.Contains(tab, want) {
		t.Errorf("table lacks row\n%s\ngot:\n%s", want, tab)
	}
	if !strings.Contains(tab, "| swarmgate | sse/1000 | 1 | 500 | 0 / 100 / 0 | 0.0 | 600 | 0 | 0 | 0 |  |  |  |") {
		t.Errorf("row without baseline must have no ratios:\n%s", tab)
	}
}
