// Package reserve implements reserve-then-settle for token-per-minute limits
// and money budgets.
//
// At admission one Lua script covers every applicable scope of the request
// (tenant TPM, tenant×model TPM, virtual-key TPM when given, the hard-capped
// budget of the request's sub-key and of every key above it, the tenant's
// monthly hard cap): it drops expired entries, checks that each scope can
// hold the request's worst case (estimated prompt plus max output tokens, and
// their cost at the target's price) and, only if all can, records the
// reservation in each. All keys of a request share the tenant's hash tag, so
// the script runs in one slot on Redis Cluster.
//
// Each scope is a sorted set of members scored by the time they stop
// counting plus a hash of their amounts and a running sum. An unsettled
// reservation counts until accounting.reservation_ttl, so a request that
// never finishes (a crashed replica) frees its share by itself. Settle
// replaces a TPM reservation by the provider's real usage, which then counts
// until one window after admission (a sliding log: the token window is
// sliding, not fixed), and removes a money reservation (the ledger now
// carries the real cost). A sub-key budget's spend is not the ledger's: its
// settle adds the real cost to the key's own counter in the same script that
// drops its hold. Settle is idempotent per request id.
package reserve
