package usage

import "bytes"

// Server-sent events framing, per the WHATWG HTML "server-sent events"
// section (https://html.spec.whatwg.org/multipage/server-sent-events.html):
// lines end in CRLF, LF or a lone CR; a blank line dispatches the event;
// "data" lines are joined with LF; lines starting with ':' are comments; a
// field without ':' has an empty value; one space after the ':' is dropped.

// MaxEventBytes caps the bytes held for one event (its data and partial
// line). A larger event is dropped and counted, never buffered further.
const MaxEventBytes = 1 << 20

// nextTerminator returns the index of the first CR or LF in b, or -1.
func nextTerminator(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if j := bytes.IndexByte(b[:i], '\r'); j >= 0 {
		return j
	}
	return i
}

// splitField splits an event line into field name and value.
func splitField(line []byte) (field, value []byte) {
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

// eventData appends the data of one complete event block (its raw lines,
// any terminators) to dst, joined like a browser would, and reports whether
// the block had a data field.
func eventData(dst, block []byte) ([]byte, bool) {
	has := false
	for len(block) > 0 {
		j := nextTerminator(block)
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
		f, v := splitField(line)
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
