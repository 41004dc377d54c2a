// Package keypool chooses the upstream API key for each attempt of a request
// and keeps one circuit breaker per key.
//
// A KeyPool per backend runs nginx's smooth weighted round robin over the
// keys that are usable now: breaker closed (or half-open with its single
// probe free), under their RPM/TPM and in-flight caps, and not already tried
// by the same request. Breaker trips, probe results and provider
// "remaining: 0" signals are shared with the other replicas through Redis
// (PUBLISH plus a polled hash as a backstop), and the per-backend health that
// follows from them feeds the control plane's EDS.
//
// The package holds policy only: no gRPC or Envoy types. docs/keypool.md
// describes the algorithm, the breaker state machine and the measured
// propagation bound.
package keypool
