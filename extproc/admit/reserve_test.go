package admit

import (
	"testing"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
)

// The money hold is priced at the target whose worst case for this
// request is dearest, whatever its price per million tokens says.
func TestDearest(t *testing.T) {
	a := config.Price{InputPerMTok: 10, OutputPerMTok: 10}
	b := config.Price{InputPerMTok: 1, OutputPerMTok: 30}
	m := &config.Model{Targets: []config.Target{{Backend: "a", Price: a}, {Backend: "b", Price: b}, {Backend: "free"}}}
	tests := []struct {
		name           string
		backends       []string
		prompt, maxOut int
		want           config.Price
		hold           float64 // the reserver's hold at that price
	}{
		// A 100k-token prompt with a short answer: A costs 1.001, B 0.103.
		{"long prompt, short answer", []string{"a", "b"}, 100_000, 100, a, 1.001},
		{"short prompt, long answer", []string{"a", "b"}, 100, 100_000, b, 3.0001},
		{"only the backends that may serve", []string{"b", "free"}, 100_000, 100, b, 0.103},
		{"unpriced only", []string{"free"}, 100, 100, config.Price{}, 0},
		{"no backend", nil, 100, 100, config.Price{}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := dearest(m, tc.backends, tc.prompt, tc.maxOut)
			if got != tc.want {
				t.Fatalf("dearest = %+v, want %+v", got, tc.want)
			}
			if h := pricing.RateOf(got).Estimate(int64(tc.prompt), int64(tc.maxOut)); h != pricing.FromFloat(tc.hold) {
				t.Fatalf("hold %s, want %g", h, tc.hold)
			}
		})
	}
	// On the admission path: no allocation.
	backends := []string{"a", "b"}
	if n := testing.AllocsPerRun(100, func() { _ = dearest(m, backends, 100_000, 100) }); n != 0 {
		t.Fatalf("%g allocations per call", n)
	}
}
