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
	var r Request
	s := scanner{b: body}
	var semErr error // first non-syntax problem; reported after validation
	setSem := func(err error) {
		if semErr == nil {
			semErr = err
		}
	}
	if s.peek() != '{' {
		if err := s.skip(); err != nil {
			return r, err
		}
		if err := s.trailing(); err != nil {
			return r, err
		}
		return r, ErrNotObject
	}
	seenModel := false
	var model, user rawString // materialized once the body is known valid
	maxTokens, maxCompletion := -1, -1
	r.at.lastEnd = s.i + 1
	member := func(key []byte, esc bool) error {
		s.ws()
		name := key
		if esc {
			var buf [maxKey]byte
			name = decodeKey(&buf, key)
		}
		switch string(name) {
		case "model":
			if seenModel {
				setSem(ErrDuplicateModel)
			}
			seenModel = true
			model = rawString{}
			switch s.peek() {
			case '"':
				raw, e, err := s.str(nil)
				model = rawString{raw, e}
				return err
			case 'n':
				return s.literal("null")
			default:
				setSem(ErrModelType)
				return s.skip()
			}
		case "stream":
			v, ok, err := s.boolOrNull()
			if !ok {
				setSem(&FieldError{Field: "stream", Want: "a boolean"})
			}
			r.Stream = v
			return err
		case "stream_options":
			r.IncludeUsage = false
			r.at.streamOpts, r.at.hasStreamOp = span{start: s.i}, true
			r.at.soMembers, r.at.hasIU = 0, false
			var err error
			switch s.peek() {
			case '{':
				err = s.object(func(k []byte, e bool) error {
					r.at.soMembers++
					if !keyIs(k, e, "include_usage") {
						return s.skip()
					}
					s.ws()
					start := s.i
					v, ok, err := s.boolOrNull()
					if !ok {
						setSem(&FieldError{Field: "stream_options.include_usage", Want: "a boolean"})
					}
					r.IncludeUsage = v
					r.at.includeUsage, r.at.hasIU = span{start, s.i}, true
					return err
				})
			case 'n':
				err = s.literal("null")
			default:
				setSem(&FieldError{Field: "stream_options", Want: "an object"})
				err = s.skip()
			}
			r.at.streamOpts.end = s.i
			return err
		case "tools", "functions":
			start := s.i
			switch s.peek() {
			case '[':
				n := 0
				err := s.array(func() error { n++; return s.skip() })
				if n > 0 {
					r.HasTools = true
				}
				r.ToolsBytes += s.i - start
				return err
			case 'n':
				return s.literal("null")
			default:
				setSem(&FieldError{Field: string(name), Want: "an array"})
				return s.skip()
			}
		case "max_tokens", "max_completion_tokens", "max_output_tokens":
			v, ok, err := s.countOrNull()
			if !ok {
				setSem(&FieldError{Field: string(name), Want: "a non-negative integer"})
			}
			r.HasMaxTokens = r.HasMaxTokens || v >= 0
			if string(name) == "max_tokens" {
				maxTokens = v
			} else { // max_completion_tokens (chat), max_output_tokens (responses)
				maxCompletion = v
			}
			return err
		case "messages":
			switch s.peek() {
			case '[':
				return s.array(func() error {
					r.Messages++
					if s.peek() != '{' {
						setSem(&FieldError{Field: "messages", Want: "an array of objects"})
						return s.skip()
					}
					return s.message(&r)
				})
			case 'n':
				return s.literal("null")
			default:
				setSem(&FieldError{Field: "messages", Want: "an array"})
				return s.skip()
			}
		case "prompt", "input", "instructions", "system":
			// "system" is Anthropic's system prompt: a string or text blocks.
			return s.promptValue(&r, 0)
		case "previous_response_id":
			if s.peek() == '"' {
				raw, _, err := s.str(nil)
				r.PreviousResponseID = len(raw) > 0
				if len(raw) > 0 {
					r.PreviousResponse = string(raw)
				}
				return err
			}
			return s.skip()
		case "user":
			user = rawString{}
			switch s.peek() {
			case '"':
				raw, e, err := s.str(nil)
				user = rawString{raw, e}
				return err
			case 'n':
				return s.literal("null")
			default:
				setSem(&FieldError{Field: "user", Want: "a string"})
				return s.skip()
			}
		default:
			return s.skip()
		}
	}
	err := s.object(func(key []byte, esc bool) error {
		if err := member(key, esc); err != nil {
			return err
		}
		r.at.members++
		r.at.lastEnd = s.i
		return nil
	})
	if err != nil {
		return Request{}, err
	}
	if err := s.trailing(); err != nil {
		return Request{}, err
	}
	r.Model, r.User = materialize(model, user)
	if !utf8.ValidString(r.Model) { // decoders would see U+FFFD
		setSem(ErrModelType)
	}
	switch {
	case maxCompletion > 0:
		r.MaxTokens = maxCompletion
	case maxTokens > 0:
		r.MaxTokens = maxTokens
	}
	if semErr != nil {
		return r, semErr
	}
	if r.Model == "" {
		return r, ErrNoModel
	}
	return r, nil
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
		d, _ := unescape(buf[:0], v.raw) // decoded is never longer than raw
		b.Write(d)
	}
	write(model)
	n := b.Len()
	write(user)
	s := b.String()
	return s[:n], s[n:]
}

// trailing accepts only whitespace after the top-level value.
func (s *scanner) trailing() error {
	s.ws()
	if s.i < len(s.b) {
		return s.errAt(s.i, "invalid character "+quoteByte(s.b[s.i])+" after top-level value")
	}
	return nil
}

// boolOrNull reads true, false or null; ok is false (and the value skipped)
// for any other value.
func (s *scanner) boolOrNull() (v, ok bool, err error) {
	switch s.peek() {
	case 't':
		return true, true, s.literal("true")
	case 'f':
		return false, true, s.literal("false")
	case 'n':
		return false, true, s.literal("null")
	}
	return false, false, s.skip()
}

// countOrNull reads a non-negative integer or null (-1).
func (s *scanner) countOrNull() (v int, ok bool, err error) {
	switch c := s.peek(); {
	case c == 'n':
		return -1, true, s.literal("null")
	case c >= '0' && c <= '9':
		start := s.i
		integer, err := s.number()
		if err != nil || !integer {
			return -1, false, err
		}
		n := 0
		for _, d := range s.b[start:s.i] {
			if n > (math.MaxInt32-9)/10 {
				return -1, false, nil
			}
			n = n*10 + int(d-'0')
		}
		return n, true, nil
	}
	return -1, false, s.skip()
}

// message reads one chat message (or responses-API input item) object.
func (s *scanner) message(r *Request) error {
	st := textStats{}
	err := s.object(func(k []byte, e bool) error {
		s.ws()
		if e {
			var buf [maxKey]byte
			k = decodeKey(&buf, k)
		}
		switch string(k) {
		case "content":
			return s.content(&st)
		case "tool_calls":
			if s.peek() != '[' {
				return s.skip()
			}
			return s.array(func() error {
				if s.peek() != '{' {
					return s.skip()
				}
				return s.object(func(k []byte, e bool) error {
					if s.peek() == '{' && keyIs(k, e, "function") {
						return s.functionCall(&st)
					}
					return s.skip()
				})
			})
		case "function_call":
			if s.peek() == '{' {
				return s.functionCall(&st)
			}
			return s.skip()
		case "output", "arguments", "text":
			// responses-API input items: function_call_output.output and
			// function_call.arguments; Anthropic system text blocks
			if s.peek() == '"' {
				_, _, err := s.str(&st)
				return err
			}
		}
		return s.skip()
	})
	r.addText(st)
	return err
}

func (r *Request) addText(st textStats) {
	r.PromptBytes += st.bytes
	r.PromptNonASCIIBytes += st.nonASCII
	r.PromptSymbolBytes += st.symbols
}

// functionCall counts a {"name","arguments"} object.
func (s *scanner) functionCall(st *textStats) error {
	return s.object(func(k []byte, e bool) error {
		if s.peek() == '"' && (keyIs(k, e, "arguments") || keyIs(k, e, "name")) {
			_, _, err := s.str(st)
			return err
		}
		return s.skip()
	})
}

// content reads a message "content": a string, or an array of parts whose
// "text" members are counted (text, input_text, output_text parts); image
// and audio parts are skipped.
func (s *scanner) content(st *textStats) error {
	switch s.peek() {
	case '"':
		_, _, err := s.str(st)
		return err
	case '[':
		return s.array(func() error {
			switch s.peek() {
			case '"':
				_, _, err := s.str(st)
				return err
			case '{':
				return s.object(func(k []byte, e bool) error {
					if s.peek() == '"' && keyIs(k, e, "text") {
						_, _, err := s.str(st)
						return err
					}
					if keyIs(k, e, "content") && s.cdepth < maxContentDepth {
						// Anthropic tool_result blocks nest content.
						s.cdepth++
						err := s.content(st)
						s.cdepth--
						return err
					}
					return s.skip()
				})
			}
			return s.skip()
		})
	}
	return s.skip()
}

// promptValue reads "prompt", "input" or "instructions": strings are text,
// integers are token ids, arrays nest, objects are input items (messages).
func (s *scanner) promptValue(r *Request, depth int) error {
	switch c := s.peek(); {
	case c == '"':
		st := textStats{}
		_, _, err := s.str(&st)
		r.addText(st)
		return err
	case c == '[' && depth < 2:
		return s.array(func() error { return s.promptValue(r, depth+1) })
	case c == '{':
		r.Messages++
		return s.message(r)
	case c == '-' || (c >= '0' && c <= '9'):
		r.PromptTokenIDs++
		_, err := s.number()
		return err
	}
	return s.skip()
}

// maxContentDepth bounds nested tool_result content the scanner counts
// (deeper content is still validated, only not counted).
const maxContentDepth = 4
