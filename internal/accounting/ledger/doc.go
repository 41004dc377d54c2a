// Package ledger is the usage ledger in Redis: per tenant, model, backend and
// upstream key, per UTC day and month, it counts requests, input, output,
// cached and reasoning tokens and cost, as reported by the provider (never
// re-tokenized). It also counts per virtual key and per label (a sub-key's
// labels, bounded) by day, month and all time, so a run labelled run=… has
// its bill in one read (scopes.go).
//
// Every write is one Lua script (one round trip) that SET NX's a dedupe key
// for the request id and HINCRBY's the counters in the same atomic step, so a
// retried, duplicated or replayed report never counts twice. All keys of one
// tenant share the hash tag {t:<tenant>}, so the script stays in one slot on
// Redis Cluster; standalone and Sentinel need nothing special.
//
// When Redis cannot be reached, entries go to a bounded in-memory buffer that
// Run replays (pipelined, still idempotent). When the buffer is full the
// oldest entry is appended to the spill file (JSON lines) and replayed from
// there later; without a spill file the oldest entry is dropped, counted in
// swarmgate_ledger_dropped_total and logged at error level.
package ledger
