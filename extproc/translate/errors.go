package translate

import (
	"encoding/json"

	"github.com/swarmgate/swarmgate/extproc/family"
)

// MaxBuffered caps a JSON answer (or error body) held until its end: a
// larger one is an error, never buffered further.
const MaxBuffered = 16 << 20

// ErrorMessage is the "error" object both families' error bodies carry.
type ErrorMessage struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param"`
	Code    any    `json:"code"`
}

// ErrorBody rewrites a backend's error body (OpenAI's or Anthropic's shape)
// in the client's shape, keeping its message and type at the status the
// backend sent. A body that is neither keeps its text as the message. An
// error inside a stream has no status of its own (status 0): its type or
// code names the class (statusOf).
func ErrorBody(body []byte, status int, to family.ErrorShape) []byte {
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	var m ErrorMessage
	if json.Unmarshal(body, &v) == nil && len(v.Error) > 0 {
		if json.Unmarshal(v.Error, &m) != nil {
			_ = json.Unmarshal(v.Error, &m.Message) // {"error":"text"}
		}
	}
	if m.Message == "" {
		m.Message = string(body)
		if len(m.Message) > 1024 {
			m.Message = m.Message[:1024]
		}
	}
	e := &family.Error{Status: status, Message: m.Message, Type: m.Type, Param: m.Param}
	if c, ok := m.Code.(string); ok {
		e.Code = c
	}
	if e.Type == "" {
		e.Type = "upstream_error"
	}
	if e.Status <= 0 {
		e.Status = statusOf(e.Type, e.Code)
	}
	// Render maps the status to Anthropic's error type; an OpenAI client
	// reads an Anthropic type as the class of error, as OpenAI's own.
	_, b := to.Render(e)
	return b
}

// statusOf is the HTTP status an error type or code of either family
// stands for.
func statusOf(typ, code string) int {
	for _, s := range [2]string{code, typ} {
		switch s {
		case "rate_limit_exceeded", "rate_limit_error", "requests", "tokens", "insufficient_quota":
			return 429
		case "invalid_request_error", "invalid_value":
			return 400
		case "authentication_error", "invalid_api_key":
			return 401
		case "permission_error":
			return 403
		case "not_found_error":
			return 404
		case "request_too_large":
			return 413
		case "timeout_error":
			return 504
		case "overloaded_error":
			return 529
		}
	}
	return 500
}

// errorResponse holds an error answer to its end and writes it in the
// client's shape.
type errorResponse struct {
	status int
	to     family.ErrorShape
	buf    []byte
	over   bool
}

// NewErrorResponse is the Response of a backend's error answer (status
// 400 or more), written in the client's error shape.
func NewErrorResponse(status int, to family.ErrorShape) Response {
	return &errorResponse{status: status, to: to}
}

func (*errorResponse) Done() bool { return false }

func (r *errorResponse) Write(dst, chunk []byte, end bool) ([]byte, error) {
	if !r.over {
		if len(r.buf)+len(chunk) > MaxBuffered {
			r.over, r.buf = true, nil
		} else {
			r.buf = append(r.buf, chunk...)
		}
	}
	if !end {
		return dst, nil
	}
	if r.over {
		return append(dst, ErrorBody([]byte("the backend's error body was too large to translate"), r.status, r.to)...), nil
	}
	return append(dst, ErrorBody(r.buf, r.status, r.to)...), nil
}
