package usage

import (
	"bytes"

	"github.com/swarmgate/swarmgate/internal/jsonscan"
	"github.com/swarmgate/swarmgate/internal/sse"
)

// StreamFilter removes the usage-only chunk from an SSE stream: the event
// whose JSON has "choices":[] and a "usage" object, which the provider sends
// last when stream_options.include_usage is true. The gateway sets that flag
// for its own accounting; a client that did not ask for it must not get the
// extra chunk (OpenAI SDKs would hand it to user code as an empty delta).
//
// Feed it the chunks the client would get; forward what Write returns. It
// holds back an incomplete trailing event only while it could still be the
// usage-only one: an event whose bytes show a non-empty "choices" array is
// forwarded at once. Other chunks pass through untouched and Write returns
// the input slice itself. The zero value is ready; Reset makes it reusable.
// Not safe for concurrent use.
type StreamFilter struct {
	held    []byte // undecided bytes of the current event from earlier Writes
	out     []byte // assembled output when it cannot be a subslice
	scratch []byte // held+chunk joined
	data    []byte // data of an event being classified
	drops   []fspan

	lineLen  int  // bytes of the current line so far
	evSize   int  // bytes of the current event so far
	evLines  bool // the current event has a non-blank line
	passing  bool // current event decided: forward
	afterCR  bool // the previous Write ended in a CR terminator
	boundary bool // ... and that CR ended an event
	dropLF   bool // ... which was dropped: drop the LF completing the CRLF
	probe    choicesProbe
	removed  int
}

type fspan struct{ start, end int }

// Reset clears all state and keeps the buffers.
func (f *StreamFilter) Reset() {
	*f = StreamFilter{held: f.held[:0], out: f.out[:0], scratch: f.scratch[:0], data: f.data[:0], drops: f.drops[:0]}
}

// Removed counts the events removed so far.
func (f *StreamFilter) Removed() int { return f.removed }

// Write takes the next chunk and returns the bytes to forward now. The
// result is chunk itself or a subslice of it when possible, else a buffer
// owned by the filter that is valid until the next call.
func (f *StreamFilter) Write(chunk []byte) []byte {
	if len(chunk) == 0 { // Envoy sends empty chunks, e.g. with end_of_stream
		return chunk
	}
	f.drops = f.drops[:0]
	// heldLive: held bytes belong to the event in progress.
	w := filterPass{chunk: chunk, heldLive: len(f.held) > 0}
	i := f.afterBoundary(&w)
	for i < len(chunk) {
		j := sse.NextTerminator(chunk[i:])
		if j < 0 {
			f.lineLen += len(chunk) - i
			f.evSize += len(chunk) - i
			break
		}
		j += i
		k, crEnd := j+1, false
		if chunk[j] == '\r' {
			if j+1 < len(chunk) {
				if chunk[j+1] == '\n' {
					k = j + 2
				}
			} else {
				crEnd = true
			}
		}
		blank := f.lineLen == 0 && j == i
		f.lineLen = 0
		f.evSize += k - i
		if blank {
			f.endEvent(&w, k, crEnd)
		} else {
			f.evLines = true
			f.afterCR = f.afterCR || crEnd
		}
		i = k
	}
	tail := f.openEvent(&w)
	out := f.assemble(chunk, tail, w.emitHeld)
	// Now that the old held bytes are copied out, keep the new tail.
	if tail < len(chunk) {
		if w.heldLive {
			f.held = append(f.held, chunk[tail:]...)
		} else {
			f.held = append(f.held[:0], chunk[tail:]...)
		}
	} else if !w.heldLive {
		f.held = f.held[:0]
	}
	return out
}

// filterPass is one Write's walk over its chunk.
type filterPass struct {
	chunk    []byte
	evStart  int  // where the current event starts in chunk
	heldLive bool // the held bytes belong to the event in progress
	emitHeld bool // the held bytes go out before chunk
}

// afterBoundary handles an LF that completes the previous chunk's CR, and
// returns where the chunk's lines start.
func (f *StreamFilter) afterBoundary(w *filterPass) int {
	i := 0
	if f.afterCR {
		f.afterCR = false
		if w.chunk[0] == '\n' {
			i = 1
			if f.boundary {
				w.evStart = 1
				if f.dropLF {
					f.drops = append(f.drops, fspan{0, 1})
				}
			} else {
				f.evSize++
			}
		}
	}
	f.dropLF, f.boundary = false, false
	return i
}

// endEvent handles the blank line ending the event [w.evStart, k).
func (f *StreamFilter) endEvent(w *filterPass, k int, crEnd bool) {
	if f.evLines && !f.passing && !f.probe.pass && f.evSize <= MaxEventBytes {
		block := w.chunk[w.evStart:k]
		if w.heldLive {
			f.scratch = append(append(f.scratch[:0], f.held...), block...)
			block = f.scratch
		}
		if mayBeUsageOnly(block) && f.usageOnly(block) {
			f.drops = append(f.drops, fspan{w.evStart, k})
			f.removed++
			w.heldLive = false
			f.dropLF = crEnd
		}
	}
	if w.heldLive {
		w.emitHeld, w.heldLive = true, false
	}
	w.evStart = k
	f.evLines, f.passing, f.evSize = false, false, 0
	f.probe = choicesProbe{}
	if crEnd {
		f.afterCR, f.boundary = true, true
	}
}

// openEvent decides on the event still open at the end of the chunk and
// returns where the bytes to hold back start (len(chunk): none). Only its
// bytes are probed: a complete event is classified whole by endEvent, and
// most events are complete within their chunk.
func (f *StreamFilter) openEvent(w *filterPass) int {
	if !f.evLines && f.lineLen == 0 && !w.heldLive {
		return len(w.chunk)
	}
	if !f.passing && !f.probe.done {
		f.probe.feed(w.chunk[w.evStart:])
	}
	switch {
	case f.passing:
	case f.probe.pass || f.evSize > MaxEventBytes:
		f.passing = true
		if w.heldLive {
			w.emitHeld, w.heldLive = true, false
		}
	default:
		return w.evStart
	}
	return len(w.chunk)
}

// assemble returns held (if emitHeld) + chunk[:tail] minus the drops.
func (f *StreamFilter) assemble(chunk []byte, tail int, emitHeld bool) []byte {
	if !emitHeld {
		switch {
		case len(f.drops) == 0:
			return chunk[:tail]
		case len(f.drops) == 1 && f.drops[0].end >= tail:
			return chunk[:f.drops[0].start]
		case len(f.drops) == 1 && f.drops[0].start == 0:
			return chunk[f.drops[0].end:tail]
		}
	}
	f.out = f.out[:0]
	if emitHeld {
		f.out = append(f.out, f.held...)
	}
	pos := 0
	for _, d := range f.drops {
		if d.start > pos {
			f.out = append(f.out, chunk[pos:min(d.start, tail)]...)
		}
		pos = d.end
	}
	if pos < tail {
		f.out = append(f.out, chunk[pos:tail]...)
	}
	return f.out
}

// Flush ends the stream and returns what is still held: an event the
// upstream left without its closing blank line (nil if it was the
// usage-only event).
func (f *StreamFilter) Flush() []byte {
	held := f.held
	drop := len(held) > 0 && !f.passing && !f.probe.pass && f.evSize <= MaxEventBytes && mayBeUsageOnly(held) && f.usageOnly(held)
	removed := f.removed
	f.Reset()
	f.removed = removed
	if drop {
		f.removed++
		return nil
	}
	return held // still valid: Reset only truncates
}

// mayBeUsageOnly is a cheap necessary condition for usageOnly, which
// needs "choices":[]: the block has a '[' ws* ']'. ']' is rare in stream
// chunks (one per chunk, closing choices), so this is one vectorised
// IndexByte per event instead of a JSON walk. A block of several lines
// (event:, id:, or data split over lines) always gets the full check.
func mayBeUsageOnly(block []byte) bool {
	body := bytes.TrimRight(block, "\r\n")
	if t := sse.NextTerminator(body); t >= 0 {
		return true
	}
	for i := 0; ; i++ {
		j := bytes.IndexByte(body[i:], ']')
		if j < 0 {
			return false
		}
		i += j
		k := i - 1
		for k >= 0 && (body[k] == ' ' || body[k] == '\t') {
			k--
		}
		if k >= 0 && body[k] == '[' {
			return true
		}
	}
}

// usageOnly reports whether a complete event block is a usage-only chunk.
func (f *StreamFilter) usageOnly(block []byte) bool {
	var has bool
	f.data, has = sse.EventData(f.data[:0], block)
	return has && isUsageOnly(f.data)
}

// isUsageOnly: a JSON object with "choices":[] and a usage object, and no
// error.
func isUsageOnly(d []byte) bool {
	var s jsonscan.Scanner
	s.Reset(d)
	if s.Peek() != '{' {
		return false
	}
	emptyChoices, hasUsage, other := false, false, false
	err := s.Object(func(k []byte, esc bool) error {
		switch {
		case jsonscan.KeyIs(k, esc, "choices") && s.Peek() == '[':
			n := 0
			err := s.Array(func() error { n++; return s.Skip() })
			emptyChoices = n == 0
			return err
		case jsonscan.KeyIs(k, esc, "usage"):
			hasUsage = s.Peek() == '{'
		case jsonscan.KeyIs(k, esc, "error"):
			other = true
		}
		return s.Skip()
	})
	return err == nil && s.Trailing() == nil && emptyChoices && hasUsage && !other
}

// choicesProbe watches an event's raw bytes for `"choices"` `:` `[` and
// the byte after it: anything but ']' means the event has choices and
// cannot be the usage-only chunk. It is a byte-level state machine, so its
// verdict does not depend on where chunks split.
type choicesProbe struct {
	state int8
	pass  bool
	done  bool
}

const choicesKey = `"choices"`

func (p *choicesProbe) feed(b []byte) {
	for i := 0; i < len(b) && !p.done; i++ {
		c := b[i]
		switch {
		case p.state == 0:
			j := bytes.IndexByte(b[i:], '"')
			if j < 0 {
				return
			}
			i += j
			p.state = 1
		case int(p.state) < len(choicesKey):
			if c == choicesKey[p.state] {
				p.state++
			} else if c == '"' {
				p.state = 1
			} else {
				p.state = 0
			}
		default: // after the key: ws* ':' ws* '[' ws* then the verdict
			if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
				continue
			}
			switch {
			case p.state == int8(len(choicesKey)) && c == ':':
				p.state++
			case p.state == int8(len(choicesKey))+1 && c == '[':
				p.state++
			case p.state == int8(len(choicesKey))+2:
				p.pass = c != ']'
				p.done = true
			case c == '"':
				p.state = 1
			default:
				p.state = 0
			}
		}
	}
}
