package jsonscan

// Iter pulls the members of an object or the elements of an array one at
// a time, validating every value it steps over:
//
//	var it jsonscan.Iter
//	it.Reset(obj)
//	for key, _, val, ok := it.Member(); ok; key, _, val, ok = it.Member() { … }
//	it.Whole() // obj was exactly one valid object
//
// Values come back raw (a string with its quotes), for the caller to walk
// with another Iter or to copy as they are.
type Iter struct {
	s      Scanner
	opened bool
	closed bool
	err    error
}

// Reset makes it walk the container b.
func (it *Iter) Reset(b []byte) {
	it.s.Reset(b)
	it.opened, it.closed, it.err = false, false, nil
}

// Member is the next member of an object; ok is false at its end or at
// the first error (Err).
func (it *Iter) Member() (key []byte, escaped bool, val []byte, ok bool) {
	if !it.step('{', '}', "'{'", "expected ',' or '}' after object member, found") {
		return nil, false, nil, false
	}
	s := &it.s
	s.WS()
	key, escaped, err := s.Str(nil)
	if err == nil {
		err = s.Expect(':', "':' after object key")
	}
	if err == nil {
		val, err = s.Value()
	}
	if err != nil {
		it.err = err
		return nil, false, nil, false
	}
	return key, escaped, val, true
}

// Elem is the next element of an array; ok is false at its end or at the
// first error (Err).
func (it *Iter) Elem() (val []byte, ok bool) {
	if !it.step('[', ']', "'['", "expected ',' or ']' after array element, found") {
		return nil, false
	}
	val, it.err = it.s.Value()
	return val, it.err == nil
}

// step moves to the next item: past the opening byte the first time, past
// a ',' after that; false at the closing byte or an error.
func (it *Iter) step(opening, closing byte, what, msg string) bool {
	if it.err != nil || it.closed {
		return false
	}
	s := &it.s
	if !it.opened {
		it.opened = true
		if it.err = s.open(opening, what); it.err != nil {
			return false
		}
		if s.i < len(s.b) && s.b[s.i] == closing {
			s.i++
			it.closed = true
			return false
		}
		return true
	}
	more, err := s.next(closing, msg)
	it.err, it.closed = err, !more && err == nil
	return more
}

// Err is the syntax error that ended the walk, if any.
func (it *Iter) Err() error { return it.err }

// Whole reports, once Member or Elem returned false, that the document
// was exactly one valid container with only white space after it.
func (it *Iter) Whole() bool {
	return it.err == nil && it.closed && it.s.Trailing() == nil
}
