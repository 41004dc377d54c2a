package messageschat

import (
	"strconv"

	"github.com/swarmgate/swarmgate/internal/jsonscan"
)

// Chat chunks are walked with internal/jsonscan's Iter, which hands out
// the raw bytes of values, so the stream translation copies a chat chunk's
// strings as their JSON tokens without decoding them, allocating nothing
// per chunk. Keys are compared as written: a key spelled with escapes is
// not recognised (no chat backend writes one).

// messagesChatIter walks the members of an object or the elements of an
// array. The zero value (what messagesChatEnter returns for another kind
// of value) walks nothing.
type messagesChatIter struct {
	it   jsonscan.Iter
	live bool
}

// messagesChatEnter starts walking the object or array v, if it is one of
// kind ('{' or '[').
func messagesChatEnter(v []byte, kind byte) (messagesChatIter, bool) {
	var it messagesChatIter
	if len(v) < 2 || v[0] != kind {
		return it, false
	}
	it.it.Reset(v)
	it.live = true
	return it, true
}

// member is the next key and value of an object.
func (it *messagesChatIter) member() (key, val []byte, ok bool) {
	if !it.live {
		return nil, nil, false
	}
	key, _, val, ok = it.it.Member()
	return key, val, ok
}

// elem is the next element of an array.
func (it *messagesChatIter) elem() ([]byte, bool) {
	if !it.live {
		return nil, false
	}
	return it.it.Elem()
}

// messagesChatInt reads an integer value; false for anything else.
func messagesChatInt(v []byte) (int, bool) {
	n, err := strconv.Atoi(string(v)) // no allocation: the conversion does not escape
	return n, err == nil
}
