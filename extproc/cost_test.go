package extproc_test

import (
	"testing"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// The entry handed to the ledger and to Settle carries its cost, priced
// once at the answering target's price.
func TestEntryIsPricedOnceAtTheServingTarget(t *testing.T) {
	small := config.Price{InputPerMTok: 1, OutputPerMTok: 2}
	big := config.Price{InputPerMTok: 5, OutputPerMTok: 15, CachedInputPerMTok: 0.5}
	for _, tc := range []struct {
		backend, key string
		price        config.Price
	}{
		{"small", "small-1", small},
		{"big", "big-1", big},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Models[0].Targets[0].Price, cfg.Models[0].Targets[1].Price = small, big
			h := newHarness(t, cfg)
			st, cancel := admit(t, h, `{"model":"chat","messages":[{"role":"user","content":"hello"}]}`)
			defer cancel()
			roundTrip(t, st, respHeaders(false, ":status", "200", "content-type", "application/json",
				contract.HeaderBackend, tc.backend, contract.HeaderUpstreamKey, tc.key))
			roundTrip(t, st, respBody(fixture(t, "openai_chat.json"), true))
			e := h.cap.waitEntry(t)
			want := pricing.RateOf(tc.price).Cost(e.Usage)
			if e.Usage.PromptTokens != 1117 || e.Cost != want || want == 0 {
				t.Errorf("entry usage %+v cost %v, want cost %v", e.Usage, e.Cost, want)
			}
		})
	}
}
