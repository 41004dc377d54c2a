package chatreq

import (
	"errors"
	"strconv"
)

// Every error Scan, SetIncludeUsage and SetModel return means the client sent
// a request the gateway must answer with 400: a *SyntaxError, a *FieldError or
// one of the sentinel errors below (test with errors.Is).
var (
	// ErrNotObject: the body is valid JSON but not an object.
	ErrNotObject = errors.New("request body must be a JSON object")
	// ErrNoModel: the top-level "model" member is missing, null or "".
	ErrNoModel = errors.New(`request body has no "model"`)
	// ErrModelType: "model" is present but not a (valid UTF-8) string.
	ErrModelType = errors.New(`"model" must be a UTF-8 string`)
	// ErrDuplicateModel: "model" appears twice at top level. JSON parsers
	// disagree on which one wins, so the gateway could route and bill one
	// model while the upstream serves the other.
	ErrDuplicateModel = errors.New(`"model" appears more than once`)
)

// SyntaxError reports malformed JSON and where it is. Line and Col are
// 1-based; Col counts bytes.
type SyntaxError struct {
	Offset int // byte offset of the offending byte (len(body) at unexpected end)
	Line   int
	Col    int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return "invalid JSON at line " + strconv.Itoa(e.Line) + ", column " + strconv.Itoa(e.Col) +
		" (offset " + strconv.Itoa(e.Offset) + "): " + e.Msg
}

func newSyntaxError(b []byte, off int, msg string) *SyntaxError {
	line, col := 1, 1
	if off > len(b) {
		off = len(b)
	}
	for _, c := range b[:off] {
		if c == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return &SyntaxError{Offset: off, Line: line, Col: col, Msg: msg}
}

// FieldError reports a known top-level member with the wrong type or value,
// e.g. "stream":"yes" or "max_tokens":-1. Field is a fixed member name, never
// request input.
type FieldError struct {
	Field string
	Want  string
}

func (e *FieldError) Error() string { return `"` + e.Field + `" must be ` + e.Want }
