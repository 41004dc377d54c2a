// Package admission holds requests that only lack capacity that comes back
// soon (keys cooling down or paced, per-key in-flight caps) until they can
// be admitted, within a bounded wait, in one order shared by every ext_proc
// replica.
//
// The order is self-clocked fair queueing (SCFQ, Golestani 1994) per scope
// (the target backends of a request): a ticket's tag is
// class·2^40 + max(V, F[tenant]) + 1/weight, where V is the tag of the last
// ticket admitted in the scope and F[tenant] the tenant's last tag. Lower
// tags go first, so a lower class always goes before a higher one, tenants
// share in proportion to their weights, and one tenant's tickets leave in
// arrival order. Admission is also paced: a scope with a known request rate
// (the sum of its usable keys' RPM) admits through a GCRA whose theoretical
// arrival time is part of the same state, so a reopened key is not
// stampeded by every replica's waiters at once.
//
// A ticket that leaves unadmitted (its wait ended, its client went away,
// its replica died and its deadline passed) gives its tenant back the
// 1/weight joining charged: F[tenant] falls by it (not below V). Charged
// for abandoned tickets, a tenant whose requests timed out went behind the
// others for as many turns as it had lost, so the shares drifted from the
// weights exactly when capacity was short.
//
// The state lives in an Order: RedisOrder (one Lua script per decision, so
// replicas agree) or LocalOrder (one process; also the fail-open fallback
// when Redis is unreachable). Policy only: no gRPC or Envoy types.
package admission
