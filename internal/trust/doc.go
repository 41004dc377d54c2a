// Package trust holds what swarmgate's gRPC listeners and clients use to
// decide whom to trust: TLS and mutual-TLS credentials whose certificate,
// key and CA files are re-read when they change (rotation without restart),
// client identities (URI SAN such as a SPIFFE ID, or DNS SAN, exact match)
// and the fleet secret Envoy sends to ext_proc when no client certificate
// can prove who it is. docs/security.md is the threat model.
package trust
