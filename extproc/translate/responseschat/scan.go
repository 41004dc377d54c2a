package responseschat

import (
	"errors"
	"unicode/utf8"

	"github.com/swarmgate/swarmgate/internal/jsonscan"
)

// responsesChatDeltaChunk is what the one-pass scanner reads from the
// chunks that make up almost all of a chat stream: one choice whose delta
// is text, a refusal, or one tool call's next arguments. Strings stay
// escaped as the backend sent them (validated JSON string contents): the
// translation copies them into its events without decoding them.
type responsesChatDeltaChunk struct {
	content, refusal []byte // nil when absent, null or ""
	args             []byte // a tool call's arguments delta
	argsIndex        int
	hasArgs          bool
	finish           []byte // finish_reason, nil when null
}

// responsesChatScanDelta reads a chunk of that shape in one pass without
// allocating. It answers false for anything else (the first chunk, a
// tool call's opening delta with its id and name, usage, an error, a
// second choice, JSON it does not expect): those take encoding/json.
func responsesChatScanDelta(data []byte, d *responsesChatDeltaChunk) bool {
	*d = responsesChatDeltaChunk{}
	r := responsesChatReader{d: d}
	r.s.Reset(data)
	if r.s.Peek() != '{' {
		return false
	}
	err := r.s.Object(func(key []byte, esc bool) error {
		switch {
		case jsonscan.KeyIs(key, esc, "choices"):
			return r.array(func() error {
				if r.choices++; r.choices > 1 {
					return errResponsesChatShape
				}
				return r.object(r.choice)
			})
		case jsonscan.KeyIs(key, esc, "usage"), jsonscan.KeyIs(key, esc, "error"):
			return r.s.Literal("null")
		}
		return r.s.Skip()
	})
	return err == nil && r.choices == 1 && r.s.Trailing() == nil
}

// errResponsesChatShape: valid JSON, but not a chunk the one-pass reader
// takes.
var errResponsesChatShape = errors.New("translate: not a plain delta chunk")

// responsesChatReader is the state of one responsesChatScanDelta.
type responsesChatReader struct {
	s       jsonscan.Scanner
	d       *responsesChatDeltaChunk
	choices int
}

func (r *responsesChatReader) object(member func(key []byte, esc bool) error) error {
	if r.s.Peek() != '{' {
		return errResponsesChatShape
	}
	return r.s.Object(member)
}

func (r *responsesChatReader) array(elem func() error) error {
	if r.s.Peek() != '[' {
		return errResponsesChatShape
	}
	return r.s.Array(elem)
}

// choice reads a member of the one choice.
func (r *responsesChatReader) choice(key []byte, esc bool) error {
	switch {
	case jsonscan.KeyIs(key, esc, "index"):
		return r.s.Literal("0")
	case jsonscan.KeyIs(key, esc, "delta"):
		return r.object(r.delta)
	case jsonscan.KeyIs(key, esc, "finish_reason"):
		return r.nullableString(&r.d.finish)
	}
	return r.s.Skip()
}

// delta reads a member of the choice's delta.
func (r *responsesChatReader) delta(key []byte, esc bool) error {
	switch {
	case jsonscan.KeyIs(key, esc, "content"):
		return r.nullableString(&r.d.content)
	case jsonscan.KeyIs(key, esc, "refusal"):
		return r.nullableString(&r.d.refusal)
	case jsonscan.KeyIs(key, esc, "role"):
		var role []byte
		return r.nullableString(&role)
	case jsonscan.KeyIs(key, esc, "tool_calls"):
		calls := 0
		return r.array(func() error {
			if calls++; calls > 1 {
				return errResponsesChatShape
			}
			return r.toolCallArgs()
		})
	}
	return r.s.Skip() // what the translation does not read
}

// toolCallArgs reads {"index":n,"function":{"arguments":"…"}}: a tool
// call's later delta, without id or name.
func (r *responsesChatReader) toolCallArgs() error {
	d := r.d
	d.hasArgs = true
	sawIndex := false
	err := r.object(func(key []byte, esc bool) error {
		switch {
		case jsonscan.KeyIs(key, esc, "index"):
			n, err := r.smallInt()
			d.argsIndex, sawIndex = n, err == nil
			return err
		case jsonscan.KeyIs(key, esc, "function"):
			return r.object(func(key []byte, esc bool) error {
				switch {
				case jsonscan.KeyIs(key, esc, "arguments"):
					return r.nullableString(&d.args)
				case jsonscan.KeyIs(key, esc, "name"):
					return errResponsesChatShape // the call's opening delta
				}
				return r.s.Skip()
			})
		case jsonscan.KeyIs(key, esc, "id"):
			return errResponsesChatShape // the call's opening delta
		}
		return r.s.Skip()
	})
	if err == nil && !sawIndex {
		return errResponsesChatShape
	}
	return err
}

// nullableString reads a string or null into *v (nil for null or ""). The
// string is kept escaped; it must be valid UTF-8 to be copied as it is.
func (r *responsesChatReader) nullableString(v *[]byte) error {
	*v = nil
	switch r.s.Peek() {
	case 'n':
		return r.s.Literal("null")
	case '"':
	default:
		return errResponsesChatShape
	}
	var st jsonscan.TextStats
	str, _, err := r.s.Str(&st)
	if err != nil {
		return err
	}
	if st.NonASCII > 0 && !utf8.Valid(str) {
		return errResponsesChatShape
	}
	if len(str) > 0 {
		*v = str
	}
	return nil
}

// smallInt reads a non-negative integer below 10⁶ (a tool call index).
func (r *responsesChatReader) smallInt() (int, error) {
	if c := r.s.Peek(); c < '0' || c > '9' {
		return 0, errResponsesChatShape
	}
	raw, integer, err := r.s.Number()
	if err != nil {
		return 0, err
	}
	if !integer || len(raw) > 6 {
		return 0, errResponsesChatShape
	}
	n := 0
	for _, c := range raw {
		n = n*10 + int(c-'0')
	}
	return n, nil
}
