// Package envoymsg is the Envoy side of the ext_proc data path: the
// messages swarmgate answers Envoy with (reusable per-stream answers,
// header mutations, local replies, dynamic metadata), their hand-written
// protobuf encoding (Codec), reading Envoy's headers and request
// attributes, and the cache of parsed upstream host metadata. It holds no
// policy: what to answer is decided in package extproc and its admission
// steps (extproc/admit); this package only says it in Envoy's terms.
package envoymsg
