package pricing

import "github.com/swarmgate/swarmgate/internal/accounting/usage"

// Usage is the token usage a Rate prices: usage.Usage itself, named here so
// callers that only price need not import the parsers. The provider's own
// cost figure (Usage.Cost) is ignored: cost comes from the price table.
type Usage = usage.Usage
