package reserve

import (
	"math"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
)

// Billing policies for a stream cut short (config accounting.bill_on_disconnect).
const (
	BillReported  = "reported"  // provider usage if it reported any, else delivered
	BillDelivered = "delivered" // estimated from the content bytes delivered
	BillReserved  = "reserved"  // the whole reservation
)

// Cutoff is what is known about a request that ended by a client disconnect
// or an upstream reset.
type Cutoff struct {
	// Reported is the provider's usage if a usage report arrived.
	Reported *pricing.Usage
	// DeliveredBytes counts completion content bytes streamed to the
	// client (text deltas, not SSE framing).
	DeliveredBytes int64
}

// DisconnectUsage decides what a cut-short request is billed, per policy.
// The result goes to the ledger (Entry.Partial = true) and to Settle, so
// the record is never lost. Delivered tokens are estimated at
// bytesPerToken (request.bytes_per_token), rounded up and not capped at the
// reserved max output (without max_tokens the provider is not bound by it);
// the prompt counts as
// reserved (the estimate), since the provider read all of it.
func DisconnectUsage(policy string, res Reservation, c Cutoff, bytesPerToken float64) pricing.Usage {
	delivered := func() pricing.Usage {
		if bytesPerToken <= 0 {
			bytesPerToken = 4
		}
		out := int64(math.Ceil(float64(max(c.DeliveredBytes, 0)) / bytesPerToken))
		return pricing.Usage{PromptTokens: res.Prompt, CompletionTokens: out, TotalTokens: res.Prompt + out}
	}
	switch policy {
	case BillReserved:
		return pricing.Usage{PromptTokens: res.Prompt, CompletionTokens: res.MaxOutput, TotalTokens: res.Tokens}
	case BillDelivered:
		return delivered()
	default: // BillReported
		if c.Reported != nil {
			return *c.Reported
		}
		return delivered()
	}
}
