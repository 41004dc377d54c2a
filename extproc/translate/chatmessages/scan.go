package chatmessages

// Stream events are read with internal/jsonscan: it walks an object's
// members and checks every value's syntax as it steps over it (RFC 8259,
// as json.Valid does, which the fuzz test holds it to), so an event is
// read and validated without decoding or allocating. Values are raw bytes;
// a string the client gets is copied as the literal it is.

import (
	"unicode/utf8"

	"github.com/swarmgate/swarmgate/internal/jsonscan"
)

// chatMessagesValid reports whether b is one JSON value (with white space
// around it).
func chatMessagesValid(b []byte) bool { return jsonscan.Valid(b) }

// chatMessagesMembers walks an object's members, checking each value:
//
//	for m := (chatMessagesMembers{b: obj}); m.next(); { use m.key, m.val }
//	m.ok() // the whole of b was one valid object
//
// key is the raw text between the key's quotes, val the raw value.
type chatMessagesMembers struct {
	b        []byte
	key, val []byte
	it       jsonscan.Iter
	started  bool
}

func (m *chatMessagesMembers) next() bool {
	if !m.started {
		m.started = true
		m.it.Reset(m.b)
	}
	var ok bool
	m.key, _, m.val, ok = m.it.Member()
	return ok
}

// ok reports, after next returned false, that b held exactly one valid
// object.
func (m *chatMessagesMembers) ok() bool { return m.it.Whole() }

// chatMessagesIsString: a raw value that is a JSON string literal a client
// can be sent as it is (valid UTF-8).
func chatMessagesIsString(raw []byte) bool {
	return len(raw) >= 2 && raw[0] == '"' && utf8.Valid(raw)
}

// chatMessagesInt reads a raw non-negative integer; ok is false for
// anything else (null, a fraction, a sign, too many digits).
func chatMessagesInt(raw []byte) (n int64, ok bool) {
	if len(raw) == 0 || len(raw) > 18 {
		return 0, false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
