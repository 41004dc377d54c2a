package translate

import "github.com/swarmgate/swarmgate/internal/sse"

// Event is one server-sent event of a backend stream: its event name and
// its data lines joined by LF.
type Event = sse.Event

// Events splits a backend stream into events across chunk boundaries
// (package sse). Its buffers are reused: an Event's slices are valid until
// the next Feed.
type Events = sse.Events

// maxEvent caps the bytes held for one event; a larger event is an error.
const maxEvent = sse.MaxEventBytes

// ErrEventTooLarge is a backend event above maxEvent.
var ErrEventTooLarge = sse.ErrEventTooLarge

type errorString string

func (e errorString) Error() string { return string(e) }

// AppendEvent writes one event with an optional name; data must not hold a
// line break (JSON written compactly never does).
func AppendEvent(dst []byte, name string, data []byte) []byte {
	return sse.AppendEvent(dst, name, data)
}
