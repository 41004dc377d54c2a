// Package chatreq reads what the gateway needs from an OpenAI-style request
// body (chat completions, completions, embeddings, responses) in one
// validating pass, without unmarshalling it into structs, and edits the body
// in place of a re-marshal so that everything else stays byte for byte.
//
// It has no gRPC or Envoy types: extproc/ calls it on the buffered body.
package chatreq

import (
	"math"
	"strings"
	"unicode/utf8"

	"github.com/swarmgate/swarmgate/internal/jsonscan"
)

// Request is what one Scan of a request body finds.
type Request struct {
	Model        string // top-level "model" (never empty when Scan succeeds)
	Stream       bool   // "stream": true
	IncludeUsage bool   // "stream_options": {"include_usage": true}
	HasTools     bool   // non-empty "tools" or "functions"
	// MaxTokens is "max_completion_tokens" (or the responses API's
	// "max_output_tokens"), else "max_tokens"; 0 if absent.
	MaxTokens int
	// Messages counts "messages" entries (chat) or item objects in "input"
	// (responses API).
	Messages int
	// PromptBytes is the decoded UTF-8 size of the text the model reads:
	// message content (strings and text parts), tool-call arguments and names
	// in the history, "prompt", "input" and "instructions" strings, and the
	// responses API's function_call arguments and function_call_output.
	PromptBytes int
	// PromptNonASCIIBytes is the part of PromptBytes that is not ASCII (CJK
	// and other scripts tokenize at fewer bytes per token).
	PromptNonASCIIBytes int
	// PromptSymbolBytes is the part of PromptBytes that is ASCII but neither
	// a letter nor whitespace: digits and punctuation, which code and JSON
	// are full of and which tokenize at about one token per 1.6 bytes.
	PromptSymbolBytes int
	// PromptTokenIDs counts pre-tokenized prompt/input entries (arrays of
	// integers), which are tokens exactly.
	PromptTokenIDs int
	// ToolsBytes is the raw JSON size of the "tools" and "functions" values;
	// tool schemas are rendered into the prompt and billed as prompt tokens.
	ToolsBytes int
	User       string // top-level "user"
	// HasMaxTokens: an output cap was given (Anthropic Messages require
	// "max_tokens").
	HasMaxTokens bool
	// PreviousResponseID: the Responses API's "previous_response_id" is set
	// (a non-empty string), i.e. the request continues server-side state.
	PreviousResponseID bool
	// PreviousResponse is its value (raw JSON string body).
	PreviousResponse string
	// StoredRef names the first member that refers to an object stored
	// with the provider rather than sent in the request: a file
	// ("file_id" in a content part or its "file"/"source"), a vector store
	// ("vector_store_ids" of a file_search tool), a container
	// ("container" as an id), a conversation, a stored prompt ("prompt"
	// as an object) or a stored item ("item_reference"). "" when none.
	StoredRef string

	at edits // where WithIncludeUsage splices; set by Scan
}

// edits records, for WithIncludeUsage, where Scan found the members that
// edit touches, so the body need not be scanned a second time.
type edits struct {
	lastEnd      int // end of the last member's value; open+1 if no members
	members      int
	streamOpts   span // the last "stream_options" value
	hasStreamOp  bool
	soMembers    int  // members of that stream_options object
	includeUsage span // its last "include_usage" value
	hasIU        bool
}

// Scan validates the whole body as JSON and extracts a Request. Errors are
// *SyntaxError, *FieldError, ErrNotObject, ErrNoModel, ErrModelType or
// ErrDuplicateModel; all mean 400. A syntax error wins over the others.
//
// Duplicate members other than "model" follow the last one, as encoding/json
// and most servers do.
func Scan(body []byte) (Request, error) {
	t := topScan{maxTokens: -1, maxCompletion: -1}
	s, r := &t.s, &t.r
	s.Reset(body)
	if s.Peek() != '{' {
		if err := s.Skip(); err != nil {
			return Request{}, err
		}
		if err := s.Trailing(); err != nil {
			return Request{}, err
		}
		return Request{}, ErrNotObject
	}
	r.at.lastEnd = s.Pos() + 1
	err := s.Object(func(key []byte, esc bool) error {
		if err := t.member(key, esc); err != nil {
			return err
		}
		r.at.members++
		r.at.lastEnd = s.Pos()
		return nil
	})
	if err != nil {
		return Request{}, err
	}
	if err := s.Trailing(); err != nil {
		return Request{}, err
	}
	t.finish()
	t.r.StoredRef = t.s.ref
	switch {
	case t.semErr != nil:
		return t.r, t.semErr
	case t.r.Model == "":
		return t.r, ErrNoModel
	}
	return t.r, nil
}

// reader is the JSON scanner with what the request walk keeps besides.
type reader struct {
	jsonscan.Scanner
	cdepth int    // nested content (tool_result blocks) being read
	ref    string // Request.StoredRef
}

// stored records the first reference to a provider-stored object.
func (s *reader) stored(name string) {
	if s.ref == "" {
		s.ref = name
	}
}

// topScan is the state of one Scan's walk over the top-level members. It
// holds the scanner and the result by value: Scan's state stays on its
// stack.
type topScan struct {
	s         reader
	r         Request
	semErr    error // first non-syntax problem; reported after validation
	seenModel bool
	// model and user are materialized once the body is known valid.
	model, user              rawString
	maxTokens, maxCompletion int
}

func (t *topScan) setSem(err error) {
	if t.semErr == nil {
		t.semErr = err
	}
}

// member reads one top-level member's value.
func (t *topScan) member(key []byte, esc bool) error {
	s, r := &t.s, &t.r
	s.WS()
	name := key
	if esc {
		var buf [jsonscan.MaxKey]byte
		name = jsonscan.DecodeKey(&buf, key)
	}
	switch string(name) {
	case "model":
		if t.seenModel {
			t.setSem(ErrDuplicateModel)
		}
		t.seenModel = true
		return t.stringOrNull(&t.model, "")
	case "stream":
		v, ok, err := s.boolOrNull()
		if !ok {
			t.setSem(&FieldError{Field: "stream", Want: "a boolean"})
		}
		r.Stream = v
		return err
	case "stream_options":
		return t.streamOptions()
	case "tools", "functions":
		return t.tools(name)
	case "max_tokens", "max_completion_tokens", "max_output_tokens":
		return t.maxTokensMember(name)
	case "messages":
		return t.messages()
	case "prompt", "input", "instructions", "system":
		if s.Peek() == '{' && string(name) == "prompt" {
			// The Responses API's stored prompt template: {"id": …}.
			s.stored("prompt")
			return s.Skip()
		}
		// "system" is Anthropic's system prompt: a string or text blocks.
		return s.promptValue(r, 0)
	case "conversation", "container":
		// The Responses API's stored conversation; Anthropic's code
		// execution container, reused by id.
		if s.Peek() != 'n' {
			s.stored(string(name))
		}
		return s.Skip()
	case "previous_response_id":
		if s.Peek() == '"' {
			raw, _, err := s.Str(nil)
			r.PreviousResponseID = len(raw) > 0
			if len(raw) > 0 {
				r.PreviousResponse = string(raw)
			}
			return err
		}
		return s.Skip()
	case "user":
		return t.stringOrNull(&t.user, "user")
	}
	return s.Skip()
}

// stringOrNull reads a string (kept raw in *v) or null; any other value
// is a FieldError for field ("": ErrModelType).
func (t *topScan) stringOrNull(v *rawString, field string) error {
	s := &t.s
	*v = rawString{}
	switch s.Peek() {
	case '"':
		raw, e, err := s.Str(nil)
		*v = rawString{raw, e}
		return err
	case 'n':
		return s.Literal("null")
	}
	if field == "" {
		t.setSem(ErrModelType)
	} else {
		t.setSem(&FieldError{Field: field, Want: "a string"})
	}
	return s.Skip()
}

// streamOptions reads "stream_options" and records where its
// include_usage sits for WithIncludeUsage.
func (t *topScan) streamOptions() error {
	s, r := &t.s, &t.r
	r.IncludeUsage = false
	r.at.streamOpts, r.at.hasStreamOp = span{start: s.Pos()}, true
	r.at.soMembers, r.at.hasIU = 0, false
	var err error
	switch s.Peek() {
	case '{':
		err = s.Object(func(k []byte, e bool) error {
			r.at.soMembers++
			if !jsonscan.KeyIs(k, e, "include_usage") {
				return s.Skip()
			}
			s.WS()
			start := s.Pos()
			v, ok, err := s.boolOrNull()
			if !ok {
				t.setSem(&FieldError{Field: "stream_options.include_usage", Want: "a boolean"})
			}
			r.IncludeUsage = v
			r.at.includeUsage, r.at.hasIU = span{start, s.Pos()}, true
			return err
		})
	case 'n':
		err = s.Literal("null")
	default:
		t.setSem(&FieldError{Field: "stream_options", Want: "an object"})
		err = s.Skip()
	}
	r.at.streamOpts.end = s.Pos()
	return err
}

// tools reads "tools" or "functions": their size counts as prompt.
func (t *topScan) tools(name []byte) error {
	s, r := &t.s, &t.r
	start := s.Pos()
	switch s.Peek() {
	case '[':
		n := 0
		err := s.Array(func() error {
			n++
			if s.Peek() != '{' {
				return s.Skip()
			}
			return s.Object(func(k []byte, e bool) error {
				switch {
				case jsonscan.KeyIs(k, e, "vector_store_ids") && s.Peek() == '[':
					s.stored("vector_store_ids")
				case jsonscan.KeyIs(k, e, "container") && s.Peek() == '"':
					s.stored("container") // code_interpreter on a stored container
				}
				return s.Skip()
			})
		})
		if n > 0 {
			r.HasTools = true
		}
		r.ToolsBytes += s.Pos() - start
		return err
	case 'n':
		return s.Literal("null")
	}
	t.setSem(&FieldError{Field: string(name), Want: "an array"})
	return s.Skip()
}

func (t *topScan) maxTokensMember(name []byte) error {
	v, ok, err := t.s.countOrNull()
	if !ok {
		t.setSem(&FieldError{Field: string(name), Want: "a non-negative integer"})
	}
	t.r.HasMaxTokens = t.r.HasMaxTokens || v >= 0
	if string(name) == "max_tokens" {
		t.maxTokens = v
	} else { // max_completion_tokens (chat), max_output_tokens (responses)
		t.maxCompletion = v
	}
	return err
}

func (t *topScan) messages() error {
	s, r := &t.s, &t.r
	switch s.Peek() {
	case '[':
		return s.Array(func() error {
			r.Messages++
			if s.Peek() != '{' {
				t.setSem(&FieldError{Field: "messages", Want: "an array of objects"})
				return s.Skip()
			}
			return s.message(r)
		})
	case 'n':
		return s.Literal("null")
	}
	t.setSem(&FieldError{Field: "messages", Want: "an array"})
	return s.Skip()
}

// finish settles what the walk found once the body is known valid.
func (t *topScan) finish() {
	r := &t.r
	r.Model, r.User = materialize(t.model, t.user)
	if !utf8.ValidString(r.Model) { // decoders would see U+FFFD
		t.setSem(ErrModelType)
	}
	switch {
	case t.maxCompletion > 0:
		r.MaxTokens = t.maxCompletion
	case t.maxTokens > 0:
		r.MaxTokens = t.maxTokens
	}
}

// rawString is a string value as it sits in the body.
type rawString struct {
	raw     []byte
	escaped bool
}

// materialize decodes model and user into one allocation.
func materialize(model, user rawString) (string, string) {
	if len(model.raw)+len(user.raw) == 0 {
		return "", ""
	}
	var b strings.Builder
	b.Grow(len(model.raw) + len(user.raw))
	write := func(v rawString) {
		if !v.escaped {
			b.Write(v.raw)
			return
		}
		var buf [128]byte
		d, _ := jsonscan.Unescape(buf[:0], v.raw) // decoded is never longer than raw
		b.Write(d)
	}
	write(model)
	n := b.Len()
	write(user)
	s := b.String()
	return s[:n], s[n:]
}

// boolOrNull reads true, false or null; ok is false (and the value skipped)
// for any other value.
func (s *reader) boolOrNull() (v, ok bool, err error) {
	switch s.Peek() {
	case 't':
		return true, true, s.Literal("true")
	case 'f':
		return false, true, s.Literal("false")
	case 'n':
		return false, true, s.Literal("null")
	}
	return false, false, s.Skip()
}

// countOrNull reads a non-negative integer or null (-1).
func (s *reader) countOrNull() (v int, ok bool, err error) {
	switch c := s.Peek(); {
	case c == 'n':
		return -1, true, s.Literal("null")
	case c >= '0' && c <= '9':
		raw, integer, err := s.Number()
		if err != nil || !integer {
			return -1, false, err
		}
		n := 0
		for _, d := range raw {
			if n > (math.MaxInt32-9)/10 {
				return -1, false, nil
			}
			n = n*10 + int(d-'0')
		}
		return n, true, nil
	}
	return -1, false, s.Skip()
}

// message reads one chat message (or responses-API input item) object.
func (s *reader) message(r *Request) error {
	st := jsonscan.TextStats{}
	err := s.Object(func(k []byte, e bool) error {
		s.WS()
		if e {
			var buf [jsonscan.MaxKey]byte
			k = jsonscan.DecodeKey(&buf, k)
		}
		switch string(k) {
		case "content":
			return s.content(&st)
		case "tool_calls":
			return s.Objects(func(k []byte, e bool) error {
				if s.Peek() == '{' && jsonscan.KeyIs(k, e, "function") {
					return s.functionCall(&st)
				}
				return s.Skip()
			})
		case "function_call":
			if s.Peek() == '{' {
				return s.functionCall(&st)
			}
			return s.Skip()
		case "output", "arguments", "text":
			// responses-API input items: function_call_output.output and
			// function_call.arguments; Anthropic system text blocks
			if s.Peek() == '"' {
				_, _, err := s.Str(&st)
				return err
			}
		case "type":
			if s.Peek() == '"' {
				v, esc, err := s.Str(nil)
				if jsonscan.KeyIs(v, esc, "item_reference") {
					s.stored("item_reference")
				}
				return err
			}
		case "file_id":
			s.stored("file_id")
		}
		return s.Skip()
	})
	r.addText(st)
	return err
}

func (r *Request) addText(st jsonscan.TextStats) {
	r.PromptBytes += st.Bytes
	r.PromptNonASCIIBytes += st.NonASCII
	r.PromptSymbolBytes += st.Symbols
}

// functionCall counts a {"name","arguments"} object.
func (s *reader) functionCall(st *jsonscan.TextStats) error {
	return s.Object(func(k []byte, e bool) error {
		if s.Peek() == '"' && (jsonscan.KeyIs(k, e, "arguments") || jsonscan.KeyIs(k, e, "name")) {
			_, _, err := s.Str(st)
			return err
		}
		return s.Skip()
	})
}

// content reads a message "content": a string, or an array of parts whose
// "text" members are counted (text, input_text, output_text parts); image
// and audio parts are skipped.
func (s *reader) content(st *jsonscan.TextStats) error {
	switch s.Peek() {
	case '"':
		_, _, err := s.Str(st)
		return err
	case '[':
		return s.Array(func() error {
			switch s.Peek() {
			case '"':
				_, _, err := s.Str(st)
				return err
			case '{':
				return s.Object(func(k []byte, e bool) error {
					if s.Peek() == '"' && jsonscan.KeyIs(k, e, "text") {
						_, _, err := s.Str(st)
						return err
					}
					if jsonscan.KeyIs(k, e, "file_id") {
						s.stored("file_id") // input_file, input_image
						return s.Skip()
					}
					if s.Peek() == '{' && (jsonscan.KeyIs(k, e, "file") || jsonscan.KeyIs(k, e, "source")) {
						// chat's {"type":"file","file":{"file_id"}};
						// Anthropic's {"source":{"type":"file","file_id"}}.
						return s.Object(func(k []byte, e bool) error {
							if jsonscan.KeyIs(k, e, "file_id") {
								s.stored("file_id")
							}
							return s.Skip()
						})
					}
					if jsonscan.KeyIs(k, e, "content") && s.cdepth < maxContentDepth {
						// Anthropic tool_result blocks nest content.
						s.cdepth++
						err := s.content(st)
						s.cdepth--
						return err
					}
					return s.Skip()
				})
			}
			return s.Skip()
		})
	}
	return s.Skip()
}

// promptValue reads "prompt", "input" or "instructions": strings are text,
// integers are token ids, arrays nest, objects are input items (messages).
func (s *reader) promptValue(r *Request, depth int) error {
	switch c := s.Peek(); {
	case c == '"':
		st := jsonscan.TextStats{}
		_, _, err := s.Str(&st)
		r.addText(st)
		return err
	case c == '[' && depth < 2:
		return s.Array(func() error { return s.promptValue(r, depth+1) })
	case c == '{':
		r.Messages++
		return s.message(r)
	case c == '-' || (c >= '0' && c <= '9'):
		r.PromptTokenIDs++
		_, _, err := s.Number()
		return err
	}
	return s.Skip()
}

// maxContentDepth bounds nested tool_result content the scanner counts
// (deeper content is still validated, only not counted).
const maxContentDepth = 4
