// Package envoysim is a test-only model of the parts of Envoy swarmgate
// relies on: an HTTP listener whose requests pass through a router-level
// ext_proc filter, route selection by header (re-done after
// clear_route_cache), a router with Envoy's retry policy and priority /
// weighted endpoint choice, and a per-attempt upstream ext_proc filter in each
// cluster. It speaks real gRPC to the ext_proc server and real HTTP to fake
// upstreams, so the openai-go SDK can be pointed at it as if it were Envoy.
//
// The model follows Envoy 1.38.0's C++ source (commit f1dd21b16c), not its
// documentation: each behaviour cites the file, function and release it
// follows, and docs/envoy-behaviour.md lists them with their conformance
// tests. TestModelAgainstEnvoy runs the conformance scripts through the real
// Envoy releases too (ToXDS gives Envoy the configuration equivalent to a
// Config) and fails when the two disagree. Where the
// model is simpler than Envoy it is stricter: FromXDS rejects settings it
// does not model. It is not a general Envoy: only the modes swarmgate
// configures are implemented.
//
// The rate-limit filter (test/rlsim) runs between the router-level ext_proc
// and the router when Config.RateLimit is set (FromXDS: the HCM has
// envoy.filters.http.ratelimit; XDSOptions.RateLimitClient is the service).
// Record.RateLimitCalls holds what it sent; Sim.WaitRecord waits for a
// request's record, which is written after the stream-done call.
package envoysim
