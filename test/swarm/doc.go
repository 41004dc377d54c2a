// Package swarm holds swarmgate's fault and swarm tests: the whole request
// path (envoysim in front of several ext_proc replicas over real gRPC,
// mockupstream relays as providers, a real redis-server, and the xDS control
// plane whose EDS pushes drive envoysim's endpoint health through a real
// SotW ADS subscription) under injected faults and under a simulated swarm
// of hundreds of concurrent agents. docs/swarm.md records the figures.
package swarm
