package messageschat

import "strconv"

// A reader of JSON already checked with json.Valid (which pools its
// scanner: no allocation). It walks objects and arrays and hands out the
// raw bytes of values, so the stream translation copies a chat chunk's
// strings as their JSON tokens without decoding them, allocating nothing
// per chunk. Keys are compared as written: a key spelled with escapes is
// not recognised (no chat backend writes one).

// messagesChatIter walks the members of an object or the elements of an
// array of valid JSON.
type messagesChatIter struct {
	d []byte
	i int
}

// messagesChatEnter starts walking the object or array v, if it is one of
// kind ('{' or '[').
func messagesChatEnter(v []byte, kind byte) (messagesChatIter, bool) {
	if len(v) < 2 || v[0] != kind {
		return messagesChatIter{}, false
	}
	return messagesChatIter{d: v, i: 1}, true
}

// member is the next key and value of an object.
func (it *messagesChatIter) member() (key, val []byte, ok bool) {
	if !it.sep() {
		return nil, nil, false
	}
	end := messagesChatSkipString(it.d, it.i)
	key = it.d[min(it.i+1, end):max(end-1, it.i+1)]
	it.i = messagesChatSpace(it.d, end)
	if it.i >= len(it.d) || it.d[it.i] != ':' {
		return nil, nil, false
	}
	it.i = messagesChatSpace(it.d, it.i+1)
	val, ok = it.value()
	return key, val, ok
}

// elem is the next element of an array.
func (it *messagesChatIter) elem() ([]byte, bool) {
	if !it.sep() {
		return nil, false
	}
	return it.value()
}

// sep moves past whitespace and a comma to the next item; false at the
// container's end.
func (it *messagesChatIter) sep() bool {
	it.i = messagesChatSpace(it.d, it.i)
	if it.i < len(it.d) && it.d[it.i] == ',' {
		it.i = messagesChatSpace(it.d, it.i+1)
	}
	return it.i < len(it.d) && it.d[it.i] != '}' && it.d[it.i] != ']'
}

func (it *messagesChatIter) value() ([]byte, bool) {
	if it.i >= len(it.d) {
		return nil, false
	}
	start := it.i
	it.i = messagesChatSkip(it.d, it.i)
	return it.d[start:it.i], true
}

func messagesChatSpace(d []byte, i int) int {
	for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// messagesChatSkip is the end of the value starting at d[i].
func messagesChatSkip(d []byte, i int) int {
	switch d[i] {
	case '"':
		return messagesChatSkipString(d, i)
	case '{', '[':
		depth := 0
		for ; i < len(d); i++ {
			switch d[i] {
			case '"':
				i = messagesChatSkipString(d, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(d)
	}
	for i < len(d) && d[i] != ',' && d[i] != '}' && d[i] != ']' && d[i] != ' ' && d[i] != '\t' && d[i] != '\n' && d[i] != '\r' {
		i++
	}
	return i
}

// messagesChatSkipString is the end of the string whose quote is d[i].
func messagesChatSkipString(d []byte, i int) int {
	for i++; i < len(d); i++ {
		switch d[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(d)
}

// messagesChatInt reads an integer value; false for anything else.
func messagesChatInt(v []byte) (int, bool) {
	n, err := strconv.Atoi(string(v)) // no allocation: the conversion does not escape
	return n, err == nil
}
