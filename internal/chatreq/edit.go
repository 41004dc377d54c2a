package chatreq

import (
	"slices"

	"github.com/swarmgate/swarmgate/internal/jsonscan"
	"github.com/swarmgate/swarmgate/internal/jsonstr"
)

// Body edits: splice the new bytes into one new buffer, leaving every other
// byte of the client's body as it was (key order, spacing, number spelling),
// which a decode/re-marshal would not.

type span struct{ start, end int } // value bytes [start, end)

// topLevel is where the members the edits touch sit in a validated body.
type topLevel struct {
	lastEnd     int // end of the last member's value; open+1 if no members
	members     int
	model       span
	models      int
	streamOpts  span
	hasStreamOp bool
}

// locate validates body and records member positions.
func locate(body []byte) (topLevel, error) {
	var t topLevel
	var s jsonscan.Scanner
	s.Reset(body)
	if s.Peek() != '{' {
		if err := s.Skip(); err != nil {
			return t, err
		}
		if err := s.Trailing(); err != nil {
			return t, err
		}
		return t, ErrNotObject
	}
	t.lastEnd = s.Pos() + 1
	err := s.Object(func(k []byte, e bool) error {
		s.WS()
		start := s.Pos()
		if err := s.Skip(); err != nil {
			return err
		}
		sp := span{start, s.Pos()}
		t.members++
		t.lastEnd = s.Pos()
		switch {
		case jsonscan.KeyIs(k, e, "model"):
			t.model = sp
			t.models++
		case jsonscan.KeyIs(k, e, "stream_options"):
			t.streamOpts = sp
			t.hasStreamOp = true
		}
		return nil
	})
	if err != nil {
		return t, err
	}
	return t, s.Trailing()
}

// splice returns body with body[start:end] replaced by the pieces, in one
// allocation.
func splice(body []byte, start, end int, pieces ...string) []byte {
	return spliceTo(nil, body, start, end, pieces...)
}

// spliceTo is splice appending to dst, which grows at most once.
func spliceTo(dst, body []byte, start, end int, pieces ...string) []byte {
	n := len(body) - (end - start)
	for _, p := range pieces {
		n += len(p)
	}
	out := slices.Grow(dst, n)
	out = append(out, body[:start]...)
	for _, p := range pieces {
		out = append(out, p...)
	}
	return append(out, body[end:]...)
}

const includeUsageTrue = `"include_usage":true`

// SetIncludeUsage makes the body ask for the final usage chunk of a stream:
// it adds "stream_options":{"include_usage":true} after the last top-level
// member, fills an existing stream_options object (or replaces a null one),
// or sets an existing include_usage to true. When include_usage is already
// true it returns body itself. It validates body like Scan.
func SetIncludeUsage(body []byte) ([]byte, error) {
	t, err := locate(body)
	if err != nil {
		return nil, err
	}
	if !t.hasStreamOp {
		sep := ","
		if t.members == 0 {
			sep = ""
		}
		return splice(body, t.lastEnd, t.lastEnd, sep, `"stream_options":{`+includeUsageTrue+`}`), nil
	}
	v := t.streamOpts
	switch body[v.start] {
	case 'n':
		return splice(body, v.start, v.end, `{`+includeUsageTrue+`}`), nil
	case '{':
	default:
		return nil, &FieldError{Field: "stream_options", Want: "an object"}
	}
	// Find include_usage (the last one wins) inside the object.
	var s jsonscan.Scanner
	s.Reset(body[:v.end])
	s.Seek(v.start)
	var iu span
	found, members := false, 0
	_ = s.Object(func(k []byte, e bool) error { // validated by locate
		s.WS()
		start := s.Pos()
		_ = s.Skip()
		members++
		if jsonscan.KeyIs(k, e, "include_usage") {
			iu, found = span{start, s.Pos()}, true
		}
		return nil
	})
	if !found {
		sep := ","
		if members == 0 {
			sep = ""
		}
		return splice(body, v.start+1, v.start+1, includeUsageTrue+sep), nil
	}
	if string(body[iu.start:iu.end]) == "true" {
		return body, nil
	}
	return splice(body, iu.start, iu.end, "true"), nil
}

// WithIncludeUsage is SetIncludeUsage for the body r was scanned from,
// without scanning it again: Scan recorded where the edit goes. body must be
// exactly the bytes Scan accepted. An unchanged body is returned itself.
func (r *Request) WithIncludeUsage(body []byte) []byte {
	if out, same := r.includeUsage(nil, body); !same {
		return out
	}
	return body
}

// AppendIncludeUsage appends WithIncludeUsage(body) to dst: a caller that
// sends the edited body and then forgets it (ext_proc answers are encoded
// before Send returns) can reuse one buffer instead of a new copy per body.
func (r *Request) AppendIncludeUsage(dst, body []byte) []byte {
	if out, same := r.includeUsage(dst, body); !same {
		return out
	}
	return append(dst, body...)
}

// includeUsage appends the edited body to dst, or reports that body asks
// for usage already (same; nothing appended).
func (r *Request) includeUsage(dst, body []byte) (out []byte, same bool) {
	a := &r.at
	if a.lastEnd == 0 || a.lastEnd > len(body) {
		// Not from Scan (a literal Request): fall back to the full edit.
		out, err := SetIncludeUsage(body)
		if err != nil || (len(out) > 0 && len(body) > 0 && &out[0] == &body[0]) {
			return dst, true
		}
		return append(dst, out...), false
	}
	if !a.hasStreamOp {
		sep := ","
		if a.members == 0 {
			sep = ""
		}
		return spliceTo(dst, body, a.lastEnd, a.lastEnd, sep, `"stream_options":{`+includeUsageTrue+`}`), false
	}
	v := a.streamOpts
	if body[v.start] == 'n' {
		return spliceTo(dst, body, v.start, v.end, `{`+includeUsageTrue+`}`), false
	}
	if !a.hasIU {
		sep := ","
		if a.soMembers == 0 {
			sep = ""
		}
		return spliceTo(dst, body, v.start+1, v.start+1, includeUsageTrue+sep), false
	}
	iu := a.includeUsage
	if string(body[iu.start:iu.end]) == "true" {
		return dst, true
	}
	return spliceTo(dst, body, iu.start, iu.end, "true"), false
}

// SetModel replaces the top-level "model" value with model, JSON-escaped.
// It validates body like Scan and fails with ErrNoModel when there is no
// model member to replace and ErrDuplicateModel when there are several.
func SetModel(body []byte, model string) ([]byte, error) {
	t, err := locate(body)
	if err != nil {
		return nil, err
	}
	switch {
	case t.models == 0:
		return nil, ErrNoModel
	case t.models > 1:
		return nil, ErrDuplicateModel
	}
	n := len(body) - (t.model.end - t.model.start) + jsonstr.Len(model)
	out := make([]byte, 0, n)
	out = append(out, body[:t.model.start]...)
	out = jsonstr.Append(out, model)
	return append(out, body[t.model.end:]...), nil
}
