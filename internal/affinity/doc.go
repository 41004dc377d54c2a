// Package affinity remembers which backend and upstream key created a
// Responses API response, shared by every ext_proc replica through Redis,
// so a request that continues it (previous_response_id) reaches that key:
// the provider keeps a response with the organisation (key) that made it.
//
// Writes never block the response path: Remember queues, one goroutine
// (Run) writes batches in one pipeline, and a full queue drops the record
// (counted). Lookups are bounded by the read timeout.
package affinity
