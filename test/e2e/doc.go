// Package e2e runs the official openai-go SDK against envoysim (built from
// the control plane's generated xDS resources) in front of swarmgate's
// ext_proc servers over real gRPC, mockupstream relays as providers, and a
// real redis-server for the key pool and the ledger.
package e2e
