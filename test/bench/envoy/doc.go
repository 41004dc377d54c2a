// Package envoybench measures what swarmgate costs on the real Envoy: the
// same chat completions through one Envoy twice, once on the listener
// swarmgate configures (router-level and per-attempt ext_proc, rate-limit
// filter, routing to a key pool) and once on a plain listener of the same
// Envoy routing straight to the same mock relay. It reports the latency
// swarmgate adds (p50, p99) and CPU per request of the Envoy process and
// of the swarmgate process separately, read from /proc/<pid>/stat.
// docs/performance.md records the figures; `make loadtest` runs it last
// (`ONLY=envoy make loadtest` alone).
package envoybench
