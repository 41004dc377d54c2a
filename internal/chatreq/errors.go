package chatreq

import (
	"errors"

	"github.com/swarmgate/swarmgate/internal/jsonscan"
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

// SyntaxError reports malformed JSON and where it is (package jsonscan's).
type SyntaxError = jsonscan.SyntaxError

// FieldError reports a known top-level member with the wrong type or value,
// e.g. "stream":"yes" or "max_tokens":-1. Field is a fixed member name, never
// request input.
type FieldError struct {
	Field string
	Want  string
}

func (e *FieldError) Error() string { return `"` + e.Field + `" must be ` + e.Want }
