// Package envoysim is a test-only model of the parts of Envoy swarmgate
// relies on: an HTTP listener whose requests pass through a router-level
// ext_proc filter, route selection by header (re-done after
// clear_route_cache), a router with Envoy's retry policy and priority /
// weighted endpoint choice, and a per-attempt upstream ext_proc filter in each
// cluster. It speaks real gRPC to the ext_proc server and real HTTP to fake
// upstreams, so the openai-go SDK can be pointed at it as if it were Envoy.
//
// No Envoy binary runs on the build machines. Each behaviour modelled here
// cites the Envoy documentation page it follows; where the model simplifies
// (for example the priority load calculation), the comment says so. It is not
// a general Envoy: only the modes swarmgate configures are implemented.
package envoysim
