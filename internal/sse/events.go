package sse

import "errors"

// Event is one server-sent event: its event name and its data lines joined
// by LF.
type Event struct {
	Name []byte
	Data []byte
}

// ErrEventTooLarge is an event above MaxEventBytes (when not DropLarge).
var ErrEventTooLarge = errors.New("sse: an event exceeds 1 MiB")

// Events splits a stream into events across chunk boundaries. It keeps
// only the current partial line and event, at most MaxEventBytes. Its
// buffers are reused: an Event's slices are valid until the next Feed.
// The zero value is ready; Reset makes it reusable.
type Events struct {
	// DropLarge skips an event above MaxEventBytes (counted by Dropped)
	// instead of failing the stream with ErrEventTooLarge.
	DropLarge bool

	pending []byte // a partial line
	name    []byte
	data    []byte
	hasData bool
	lineEnd bool // the last byte seen was CR: an LF right after it ends nothing
	discard bool // an event over the cap: skip to its blank line
	long    bool // a partial line over the cap: skip to its end
	dropped int
}

// Reset clears all state and keeps the buffers.
func (p *Events) Reset() {
	*p = Events{DropLarge: p.DropLarge, pending: p.pending[:0], name: p.name[:0], data: p.data[:0]}
}

// Held is the capacity of the buffers it keeps (the partial line, the
// event's name and data): bounded by the cap, whatever the stream.
func (p *Events) Held() int { return cap(p.pending) + cap(p.name) + cap(p.data) }

// Dropped counts the events skipped for their size (DropLarge).
func (p *Events) Dropped() int { return p.dropped }

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
		i := NextTerminator(chunk)
		if i < 0 {
			if err := p.partial(chunk); err != nil {
				return err
			}
			break
		}
		line := chunk[:i]
		long := p.long
		if len(p.pending) > 0 {
			p.pending = append(p.pending, line...)
			line = p.pending
		}
		p.lineEnd = chunk[i] == '\r'
		chunk = chunk[i+1:]
		p.pending, p.long = p.pending[:0], false
		if long { // the end of a line dropped for its size
			continue
		}
		if err := p.line(line, fn); err != nil {
			return err
		}
	}
	if end {
		if len(p.pending) > 0 && !p.long {
			if err := p.line(p.pending, fn); err != nil {
				return err
			}
		}
		p.pending, p.long, p.discard = p.pending[:0], false, false
		return p.dispatch(fn)
	}
	return nil
}

// partial keeps the start of a line the chunk does not finish.
func (p *Events) partial(b []byte) error {
	if p.long {
		return nil
	}
	if len(p.pending)+len(b)+len(p.data) > MaxEventBytes {
		p.pending, p.long = p.pending[:0], true
		return p.tooLarge()
	}
	p.pending = append(p.pending, b...)
	return nil
}

// tooLarge fails the stream, or drops the current event up to its blank
// line.
func (p *Events) tooLarge() error {
	if !p.DropLarge {
		return ErrEventTooLarge
	}
	if !p.discard {
		p.dropped++
	}
	p.discard = true
	p.name, p.data, p.hasData = p.name[:0], p.data[:0], false
	return nil
}

func (p *Events) line(line []byte, fn func(Event) error) error {
	if len(line) == 0 {
		if p.discard {
			p.discard = false
			p.name, p.data, p.hasData = p.name[:0], p.data[:0], false
			return nil
		}
		return p.dispatch(fn)
	}
	if p.discard || line[0] == ':' {
		return nil
	}
	field, value := SplitField(line)
	switch string(field) {
	case "event":
		p.name = append(p.name[:0], value...)
	case "data":
		sep := 0
		if p.hasData {
			sep = 1
		}
		if len(p.data)+sep+len(value) > MaxEventBytes {
			return p.tooLarge()
		}
		if p.hasData {
			p.data = append(p.data, '\n')
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
