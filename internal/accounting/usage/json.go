package usage

import "bytes"

// FromJSON finds the top-level "usage" object of a whole JSON response
// (chat completion, completion, embeddings, responses API) and reads it.
// ok is false when there is none, it is null, or the body is not an object.
//
// Providers put usage near the end (OpenAI: after "choices", before
// "service_tier"/"system_fingerprint"; embeddings: after "data"), so the
// last "usage" key is tried first and proven top-level by parsing from it to
// the end of the body; only when that fails is the body walked from the
// start. A multi-megabyte embeddings body is therefore not walked at all.
func FromJSON(body []byte) (Usage, bool) {
	if u, ok, proven := fromTail(body); proven {
		return u, ok
	}
	return fromWalk(body)
}

var usageKey = []byte(`"usage"`)

// fromTail tries the last `"usage"` key. proven is true when that key is a
// member of the outermost object: after its value the remaining members
// parse and the object closing them is the last byte of the body.
func fromTail(body []byte) (u Usage, ok, proven bool) {
	end := len(body)
	for tries := 0; tries < 4; tries++ {
		k := bytes.LastIndex(body[:end], usageKey)
		if k < 0 {
			return Usage{}, false, false
		}
		end = k
		// The opening quote must not be escaped (inside a string).
		n := 0
		for j := k - 1; j >= 0 && body[j] == '\\'; j-- {
			n++
		}
		if n&1 == 1 {
			continue
		}
		s := jscan{b: body, i: k + len(usageKey)}
		if s.peek() != ':' {
			continue
		}
		s.i++
		isObj := s.peek() == '{'
		if isObj {
			u, ok = parseUsage(&s)
		} else {
			s.skip()
		}
		if s.bad {
			continue
		}
		// Remaining members of the same object, then '}' and the end.
		for !s.bad && s.peek() == ',' {
			s.i++
			if s.peek() != '"' {
				s.bad = true
				break
			}
			s.str()
			if s.peek() != ':' {
				s.bad = true
				break
			}
			s.i++
			s.skip()
		}
		if s.bad || s.peek() != '}' {
			continue
		}
		s.i++
		if s.peek() != 0 {
			continue
		}
		if !isObj {
			return Usage{}, false, true
		}
		return u, ok, true
	}
	return Usage{}, false, false
}

// fromWalk walks the top-level object member by member.
func fromWalk(body []byte) (Usage, bool) {
	s := jscan{b: body}
	if s.peek() != '{' {
		return Usage{}, false
	}
	var u Usage
	found := false
	s.object(func(k []byte) {
		if string(k) == "usage" && s.peek() == '{' {
			u, found = parseUsage(&s)
			return
		}
		s.skip()
	})
	if s.bad {
		return Usage{}, false
	}
	return u, found
}

// MaxResponseIDBytes bounds a response id worth remembering; a longer one
// is not a provider's id.
const MaxResponseIDBytes = 256

// ResponseID reads the top-level "id" of a complete Responses API JSON
// body (raw JSON string body, escapes intact) in one pass, without
// building values: an "id" nested in the output items is never taken.
func ResponseID(body []byte) ([]byte, bool) {
	s := jscan{b: body}
	if s.peek() != '{' {
		return nil, false
	}
	var id []byte
	s.object(func(k []byte) {
		if string(k) == "id" && id == nil {
			if raw, ok := s.stringValue(); ok {
				id = raw
			}
			return
		}
		s.skip()
	})
	if id == nil || len(id) == 0 || len(id) > MaxResponseIDBytes {
		return nil, false
	}
	return id, true
}
