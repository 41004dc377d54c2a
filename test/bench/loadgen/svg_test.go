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
