// Package schema holds, one package per API, the wire shapes of the
// provider APIs the gateway speaks: openai (chat completions and the
// Responses API) and anthropic (Messages). The translators between API
// families (extproc/translate/...) and the mock providers
// (internal/mockupstream) both use them, so the two sides agree on one
// definition of each object.
//
// Field order is the order encoding/json writes the fields in, and tags
// (omitempty or not) decide what a zero value looks like on the wire:
// translator goldens and mock tests pin the bytes, so a change here is a
// change of what clients and backends receive.
package schema
