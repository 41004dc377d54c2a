// Package e2eenvoy runs swarmgate end to end behind a real Envoy process:
// the whole gateway in-process (package gateway: control plane, ext_proc,
// embedded rate-limit service, admin), Envoy bootstrapped from the control
// plane (xds/bootstrap), mockupstream relays as providers, a real
// redis-server, and the official openai-go SDK as the client.
//
// The tests run whenever an Envoy binary (1.38 or newer) is found: ENVOY_BIN,
// else `envoy` on PATH. Without one each test skips with a line naming what
// is missing. `go test ./test/e2e-envoy -v` shows the skip.
package e2eenvoy
