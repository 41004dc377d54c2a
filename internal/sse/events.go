package sse

import (
	"bytes"
	"errors"
)

// Event is one server-sent event: its event name and its data lines joined
// by LF. A Cut event (Events.KeepEnds) went over MaxEventBytes: Data is
// the first HeadBytes of its data and Tail the last TailBytes.
type Event struct {
	Name []byte
	Data []byte
	Tail []byte
	Cut  bool
}

// HeadBytes and TailBytes are the ends of its data a Cut event keeps.
const (
	HeadBytes = 4 << 10
	TailBytes = 64 << 10
)

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
	// KeepEnds, with DropLarge, dispatches an event above MaxEventBytes
	// as a Cut event holding the two ends of its data (counted by Cuts,
	// not Dropped) instead of skipping it: a reader can still find what
	// opens and closes it (the Responses API's last event restates the
	// whole answer, its type first and its usage last).
	KeepEnds bool

	pending  []byte // a partial line
	tail     []byte // a Cut event's last data bytes, at most 2*TailBytes
	cut      bool   // the current event went over the cap (KeepEnds)
	longData bool   // the line skipped for its size is a data line (KeepEnds)
	cuts     int
	name     []byte
	data     []byte
	hasData  bool
	lineEnd  bool // the last byte seen was CR: an LF right after it ends nothing
	discard  bool // an event over the cap: skip to its blank line
	long     bool // a partial line over the cap: skip to its end
	dropped  int
}

// Reset clears all state and keeps the buffers.
func (p *Events) Reset() {
	*p = Events{DropLarge: p.DropLarge, KeepEnds: p.KeepEnds, pending: p.pending[:0], tail: p.tail[:0], name: p.name[:0], data: p.data[:0]}
}

// Held is the capacity of the buffers it keeps (the partial line, the
// event's name and data): bounded by the cap, whatever the stream.
func (p *Events) Held() int { return cap(p.pending) + cap(p.tail) + cap(p.name) + cap(p.data) }

// Dropped counts the events skipped for their size (DropLarge).
func (p *Events) Dropped() int { return p.dropped }

// Cuts counts the events dispatched Cut (KeepEnds).
func (p *Events) Cuts() int { return p.cuts }

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
		long, longData := p.long, p.longData
		if len(p.pending) > 0 {
			p.pending = append(p.pending, line...)
			line = p.pending
		}
		p.lineEnd = chunk[i] == '\r'
		chunk = chunk[i+1:]
		p.pending, p.long, p.longData = p.pending[:0], false, false
		if long { // the end of a line dropped for its size
			if longData {
				p.appendTail(line)
			}
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
		p.pending, p.long, p.longData, p.discard = p.pending[:0], false, false, false
		return p.dispatch(fn)
	}
	return nil
}

// partial keeps the start of a line the chunk does not finish.
func (p *Events) partial(b []byte) error {
	if p.long {
		if p.longData {
			p.appendTail(b)
		}
		return nil
	}
	if len(p.pending)+len(b)+len(p.data) > MaxEventBytes {
		if p.DropLarge && p.KeepEnds && !p.discard {
			return p.cutLine(b)
		}
		p.pending, p.long = p.pending[:0], true
		return p.tooLarge()
	}
	p.pending = append(p.pending, b...)
	return nil
}

// maxFieldName bounds the bytes before a line's ':' that may still make
// it a data line ("data" and its colon, with room to spare).
const maxFieldName = 16

// cutLine handles a line that takes the event over the cap (KeepEnds):
// a data line's value goes to the cut event's ends, never whole into a
// buffer (the chunk may be megabytes); another field's line (a comment)
// is skipped alone. Until the line's ':' has arrived it may still be
// data: its first bytes are kept.
func (p *Events) cutLine(b []byte) error {
	var name, v1, v2 []byte
	if i := bytes.IndexByte(p.pending, ':'); i >= 0 {
		name, v1, v2 = p.pending[:i], p.pending[i+1:], b
	} else if j := bytes.IndexByte(b, ':'); j >= 0 && len(p.pending)+j <= maxFieldName {
		name, v2 = append(p.pending, b[:j]...), b[j+1:]
	} else if len(p.pending)+len(b) <= maxFieldName {
		p.pending = append(p.pending, b...)
		return nil
	}
	// One space after the colon is not the value's.
	if len(v1) > 0 && v1[0] == ' ' {
		v1 = v1[1:]
	} else if len(v1) == 0 && len(v2) > 0 && v2[0] == ' ' {
		v2 = v2[1:]
	}
	data := string(name) == "data"
	if data {
		p.cutData(v1, true)
		p.cutData(v2, false)
	}
	p.pending, p.long, p.longData = p.pending[:0], true, data
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
	p.name, p.data, p.hasData, p.cut, p.tail = p.name[:0], p.data[:0], false, false, p.tail[:0]
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
		if p.cut || (p.DropLarge && p.KeepEnds && len(p.data)+sep+len(value) > MaxEventBytes) {
			p.cutData(value, true)
			return nil
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
	e := Event{Name: p.name, Data: p.data}
	if p.cut {
		p.cuts++
		e.Tail, e.Cut = p.tail[max(0, len(p.tail)-TailBytes):], true
	}
	err := fn(e)
	p.name, p.data, p.hasData, p.cut, p.tail = p.name[:0], p.data[:0], false, false, p.tail[:0]
	return err
}

// cutData adds a data line's value (or a piece of one: newLine when it
// starts the line) to an event over the cap: the data so far is its head,
// cut to HeadBytes once, and every byte after goes to the tail.
func (p *Events) cutData(value []byte, newLine bool) {
	if !p.cut {
		p.cut = true
		p.tail = p.tail[:0]
		p.appendTail(p.data)
		p.data = p.data[:min(len(p.data), HeadBytes)]
	}
	if newLine && p.hasData {
		p.appendTail([]byte{'\n'})
		if len(p.data) < HeadBytes {
			p.data = append(p.data, '\n')
		}
	}
	p.appendTail(value)
	if n := HeadBytes - len(p.data); n > 0 {
		p.data = append(p.data, value[:min(n, len(value))]...)
	}
	p.hasData = true
}

// appendTail keeps the last TailBytes of what a Cut event's data adds,
// moving them to the front when the buffer reaches twice that.
func (p *Events) appendTail(b []byte) {
	if len(b) >= TailBytes {
		p.tail = append(p.tail[:0], b[len(b)-TailBytes:]...)
		return
	}
	if len(p.tail)+len(b) > 2*TailBytes {
		n := copy(p.tail, p.tail[len(p.tail)-TailBytes:])
		p.tail = p.tail[:n]
	}
	p.tail = append(p.tail, b...)
}
