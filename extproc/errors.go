package extproc

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/swarmgate/swarmgate/extproc/envoymsg"
	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/jsonstr"
)

// apiError is a refusal in OpenAI's error shape:
// {"error":{"message","type","param","code"}}.
type apiError struct {
	status  int
	message string
	typ     string
	code    string
	param   string
	headers []envoymsg.Header
	// shape is the client's family's error shape (set by refuse and the
	// upstream filter from the request's path).
	shape family.ErrorShape
}

// in sets the error shape of the client's family.
func (e *apiError) in(sh family.ErrorShape) *apiError {
	e.shape = sh
	return e
}

func (e *apiError) withRetryAfter(d time.Duration) *apiError {
	secs := int((d + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	e.headers = append(e.headers, envoymsg.Header{Key: "retry-after", Value: strconv.Itoa(secs)})
	return e
}

func (e *apiError) withHeader(k, v string) *apiError {
	e.headers = append(e.headers, envoymsg.Header{Key: k, Value: v})
	return e
}

func errInvalidKey(msg string) *apiError {
	return &apiError{status: http.StatusUnauthorized, message: msg, typ: "invalid_request_error", code: "invalid_api_key"}
}

func errBadRequest(msg, code, param string) *apiError {
	return &apiError{status: http.StatusBadRequest, message: msg, typ: "invalid_request_error", code: code, param: param}
}

func errModelNotFound(model string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "model_not_found", param: "model",
		message: "The model `" + model + "` does not exist or you do not have access to it."}
}

// render is the status and body in the client's family's shape.
func (e *apiError) render() (int, []byte) {
	if e.shape == family.OpenAI {
		return e.status, e.body()
	}
	return e.shape.Render(&family.Error{Status: e.status, Message: e.message, Type: e.typ, Code: e.code, Param: e.param})
}

// body renders the JSON by hand: it runs on refusals under load and must
// not allocate through reflection.
func (e *apiError) body() []byte {
	b := make([]byte, 0, 96+len(e.message))
	b = append(b, `{"error":{"message":`...)
	b = jsonstr.Append(b, e.message)
	b = append(b, `,"type":`...)
	b = jsonstr.Append(b, e.typ)
	b = append(b, `,"param":`...)
	if e.param == "" {
		b = append(b, "null"...)
	} else {
		b = jsonstr.Append(b, e.param)
	}
	b = append(b, `,"code":`...)
	if e.code == "" {
		b = append(b, "null"...)
	} else {
		b = jsonstr.Append(b, e.code)
	}
	return append(b, "}}"...)
}

// response is the ImmediateResponse Envoy turns into a local reply
// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/service/ext_proc/v3/external_processor.proto#envoy-v3-api-msg-service-ext-proc-v3-immediateresponse).
func (e *apiError) response() *extprocv3.ProcessingResponse {
	status, body := e.render()
	return envoymsg.Immediate(status, e.headers, body, "swarmgate_"+e.code)
}

// errNotAdmitted answers an upstream attempt that carries no valid signed
// admission: it gets no key, and the client a clear error.
func errNotAdmitted() *apiError {
	return &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "gateway_not_admitted",
		message: "The gateway could not admit this request (its authentication stage was unavailable); retry later."}
}

// errNoKey answers an attempt whose backend has no usable key: 429 with
// Retry-After when the keys are rate limited or busy (capacity comes back),
// 503 when they are failing.
func errNoKey(model string, err error) *apiError {
	var nk *NoKeyError
	if errors.As(err, &nk) {
		return errKeysExhausted(model, nk.RetryAfter, nk.Failing)
	}
	return errKeysExhausted(model, time.Second, false)
}

// errKeysExhausted: capacity that comes back (keys rate limited, out of
// quota or busy) is a 429 with Retry-After, which SDKs back off on; keys
// that are failing are a 503.
func errKeysExhausted(model string, retry time.Duration, failing bool) *apiError {
	e := &apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "upstream_keys_exhausted",
		message: "Every upstream key for `" + model + "` is rate limited or busy; retry after the indicated time."}
	if failing {
		e.status, e.typ = http.StatusServiceUnavailable, "server_error"
		e.message = "Every upstream key for `" + model + "` is failing; retry later."
	}
	return e.withRetryAfter(max(retry, time.Second))
}

// localError is the ImmediateResponse of an upstream attempt: marked so the
// router-level filter knows it is already in the client's shape.
func localError(e *apiError) *extprocv3.ProcessingResponse {
	return e.withHeader(contract.HeaderLocal, e.code).response()
}
