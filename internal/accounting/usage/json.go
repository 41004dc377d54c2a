package usage

import (
	"bytes"
	"errors"

	"github.com/swarmgate/swarmgate/internal/jsonscan"
)

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

// FromJSONTail reads the usage from the last bytes of a JSON response too
// large to keep whole: found only when its "usage" key is proven a member
// of the outermost object by the bytes after it (fromTail), which a tail
// holds as well as the whole body does.
func FromJSONTail(tail []byte) (Usage, bool) {
	if u, ok, proven := fromTail(tail); proven {
		return u, ok
	}
	return Usage{}, false
}

var usageKey = []byte(`"usage"`)

// errShape ends a walk over JSON that is valid so far but not the shape
// looked for (no allocation, unlike a syntax error).
var errShape = errors.New("usage: unexpected JSON shape")

// fromTail tries the last `"usage"` key. proven is true when that key is a
// member of the outermost object: after its value the remaining members
// parse and the object closing them is the last byte of the body.
func fromTail(body []byte) (u Usage, ok, proven bool) {
	f, ok, proven := fieldsFromTail(body, 1, nil)
	if !ok {
		return Usage{}, false, proven
	}
	return f.usage(), true, proven
}

// fieldsFromTail tries the last `"usage"` keys (up to four) for one that
// is a member of an object depth levels below the body's outermost value
// (1: of the outermost object itself): after its value the members left
// in its object parse, and so do the members after each enclosing object
// up to depth, the last closing brace the body's last byte. A proven usage
// that is not an object (null) is proven and not ok. With depth above 1,
// typ gets the string value of a "type" member of the outermost object
// after the usage (the Responses API's events name their type there when
// a relay writes the keys sorted).
func fieldsFromTail(body []byte, depth int, typ *[]byte) (f usageFields, ok, proven bool) {
	end := len(body)
	var s jsonscan.Scanner
	s.Reset(body)
	for tries := 0; tries < 4; tries++ {
		k := bytes.LastIndex(body[:end], usageKey)
		if k < 0 {
			return usageFields{}, false, false
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
		s.Seek(k + len(usageKey))
		isObj, f, ok, err := tailMember(&s)
		for level := 1; err == nil && level <= depth; level++ {
			if s.Peek() != '}' {
				err = errShape
				break
			}
			s.Seek(s.Pos() + 1)
			if level < depth {
				var t *[]byte
				if level == depth-1 {
					t = typ
				}
				err = restMembers(&s, t)
			}
		}
		if err != nil {
			continue
		}
		if s.WS(); s.Pos() != len(body) {
			continue
		}
		if !isObj {
			return usageFields{}, false, true
		}
		return f, ok, true
	}
	return usageFields{}, false, false
}

// tailMember reads the usage member's ':' and value and the members that
// follow it in the same object, up to its closing brace.
func tailMember(s *jsonscan.Scanner) (isObj bool, f usageFields, ok bool, err error) {
	if s.Peek() != ':' {
		return false, usageFields{}, false, errShape
	}
	s.Seek(s.Pos() + 1)
	if isObj = s.Peek() == '{'; isObj {
		f, ok, err = parseFields(s)
	} else {
		err = s.Skip()
	}
	if err == nil {
		err = restMembers(s, nil)
	}
	return isObj, f, ok, err
}

// restMembers reads the members (",key:value") left in an object, up to
// its closing brace; a "type" member's string value into *typ, if typ is
// set.
func restMembers(s *jsonscan.Scanner, typ *[]byte) error {
	for s.Peek() == ',' {
		s.Seek(s.Pos() + 1)
		s.WS()
		k, esc, err := s.Str(nil)
		if err != nil {
			return err
		}
		if s.Peek() != ':' {
			return errShape
		}
		s.Seek(s.Pos() + 1)
		if typ != nil && jsonscan.KeyIs(k, esc, "type") && s.Peek() == '"' {
			*typ, _, err = s.Str(nil)
		} else {
			err = s.Skip()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fromWalk walks the top-level object member by member.
func fromWalk(body []byte) (Usage, bool) {
	var s jsonscan.Scanner
	s.Reset(body)
	if s.Peek() != '{' {
		return Usage{}, false
	}
	var u Usage
	found := false
	err := s.Object(func(k []byte, esc bool) error {
		if jsonscan.KeyIs(k, esc, "usage") && s.Peek() == '{' {
			var err error
			u, found, err = parseUsage(&s)
			return err
		}
		return s.Skip()
	})
	if err != nil {
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
	var s jsonscan.Scanner
	s.Reset(body)
	if s.Peek() != '{' {
		return nil, false
	}
	var id []byte
	// A syntax error after the id does not void it: the body is the
	// provider's, and only its id is wanted.
	_ = s.Object(func(k []byte, esc bool) error {
		if jsonscan.KeyIs(k, esc, "id") && id == nil && s.Peek() == '"' {
			var err error
			id, _, err = s.Str(nil)
			return err
		}
		return s.Skip()
	})
	if len(id) == 0 || len(id) > MaxResponseIDBytes {
		return nil, false
	}
	return id, true
}
