package translate

import "bytes"

// Event is one server-sent event of a backend stream (WHATWG HTML,
// "server-sent events"): its event name and its data lines joined by LF.
type Event struct {
	Name []byte
	Data []byte
}

// maxEvent caps the bytes held for one event; a larger event is an error.
const maxEvent = 1 << 20

// Events splits a backend stream into events across chunk boundaries. Its
// buffers are reused: an Event's slices are valid until the next Feed.
type Events struct {
	pending []byte // a partial line
	name    []byte
	data    []byte
	hasData bool
	lineEnd bool // the last byte seen was CR: an LF right after it ends nothing
}

// ErrEventTooLarge is a backend event above maxEvent.
var ErrEventTooLarge = errorString("translate: a backend event exceeds 1 MiB")

type errorString string

func (e errorString) Error() string { return string(e) }

// Feed reads a chunk and calls fn for every event it completes. end
// dispatches a last event whose blank line never came.
func (p *Events) Feed(chunk []byte, end bool, fn func(Event) error) error {
	for len(chunk) > 0 {
		if p.lineEnd {
			p.lineEnd = false
			if chunk[0] == '\n' {
				chunk = chunk[1:]
				continue
			}
		}
		i := bytes.IndexAny(chunk, "\r\n")
		if i < 0 {
			if len(p.pending)+len(chunk) > maxEvent {
				return ErrEventTooLarge
			}
			p.pending = append(p.pending, chunk...)
			break
		}
		line := chunk[:i]
		if len(p.pending) > 0 {
			p.pending = append(p.pending, line...)
			line = p.pending
		}
		p.lineEnd = chunk[i] == '\r'
		chunk = chunk[i+1:]
		if err := p.line(line, fn); err != nil {
			return err
		}
		p.pending = p.pending[:0]
	}
	if end {
		if len(p.pending) > 0 {
			if err := p.line(p.pending, fn); err != nil {
				return err
			}
			p.pending = p.pending[:0]
		}
		return p.dispatch(fn)
	}
	return nil
}

func (p *Events) line(line []byte, fn func(Event) error) error {
	if len(line) == 0 {
		return p.dispatch(fn)
	}
	if line[0] == ':' {
		return nil
	}
	field, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(field) {
	case "event":
		p.name = append(p.name[:0], value...)
	case "data":
		if p.hasData {
			p.data = append(p.data, '\n')
		}
		if len(p.data)+len(value) > maxEvent {
			return ErrEventTooLarge
		}
		p.data = append(p.data, value...)
		p.hasData = true
	}
	return nil
}

func (p *Events) dispatch(fn func(Event) error) error {
	if !p.hasData {
		p.name = p.name[:0]
		return nil
	}
	err := fn(Event{Name: p.name, Data: p.data})
	p.name, p.data, p.hasData = p.name[:0], p.data[:0], false
	return err
}

// AppendEvent writes one event with an optional name; data must not hold a
// line break (JSON written compactly never does).
func AppendEvent(dst []byte, name string, data []byte) []byte {
	if name != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, name...)
		dst = append(dst, '\n')
	}
	dst = append(dst, "data: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}
