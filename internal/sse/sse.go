// Package sse is the gateway's one server-sent events kit, per the WHATWG
// HTML "server-sent events" section
// (https://html.spec.whatwg.org/multipage/server-sent-events.html): lines
// end in CRLF, LF or a lone CR; a blank line dispatches the event; "data"
// lines are joined with LF; lines starting with ':' are comments; a field
// without ':' has an empty value; one space after the ':' is dropped.
//
// Events splits a stream fed in arbitrary chunks into events; the
// functions below frame single lines and event blocks for readers that
// keep their own state (the usage-only chunk filter).
package sse

import "bytes"

// MaxEventBytes caps the bytes held for one event (its data and partial
// line).
const MaxEventBytes = 1 << 20

// NextTerminator returns the index of the first CR or LF in b, or -1.
func NextTerminator(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if j := bytes.IndexByte(b[:i], '\r'); j >= 0 {
		return j
	}
	return i
}

// SplitField splits an event line into field name and value.
func SplitField(line []byte) (field, value []byte) {
	i := bytes.IndexByte(line, ':')
	if i < 0 {
		return line, nil
	}
	value = line[i+1:]
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	return line[:i], value
}

// EventData appends the data of one complete event block (its raw lines,
// any terminators) to dst, joined like a browser would, and reports whether
// the block had a data field.
func EventData(dst, block []byte) ([]byte, bool) {
	has := false
	for len(block) > 0 {
		j := NextTerminator(block)
		line := block
		next := len(block)
		if j >= 0 {
			line = block[:j]
			next = j + 1
			if block[j] == '\r' && j+1 < len(block) && block[j+1] == '\n' {
				next = j + 2
			}
		}
		block = block[next:]
		if len(line) == 0 || line[0] == ':' {
			continue
		}
		f, v := SplitField(line)
		if string(f) != "data" {
			continue
		}
		if has {
			dst = append(dst, '\n')
		}
		dst = append(dst, v...)
		has = true
	}
	return dst, has
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
