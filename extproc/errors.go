package extproc

import (
	"errors"
	"github.com/swarmgate/swarmgate/extproc/admit"
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

// fromRefusal is an admission step's refusal as an answer.
func fromRefusal(x *admit.Refusal) *apiError {
	e := &apiError{status: x.Status, message: x.Message, typ: x.Type, code: x.Code, param: x.Param}
	if x.Retry {
		e.withRetryAfter(x.RetryAfter)
	}
	for _, h := range x.Headers {
		e.withHeader(h.Key, h.Value)
	}
	return e
}

func errBadRequest(msg, code, param string) *apiError {
	return fromRefusal(admit.BadRequest(msg, code, param))
}

func errModelNotFound(model string) *apiError { return fromRefusal(admit.ModelNotFound(model)) }

// errKeysExhausted: see admit.KeysExhausted.
func errKeysExhausted(model string, retry time.Duration, failing bool) *apiError {
	return fromRefusal(admit.KeysExhausted(model, retry, failing))
}

// render is the status and body in the client's family's shape.
func (e *apiError) render() (int, []byte) {
	if e.shape == family.OpenAI {
		return e.status, e.body()
	}
	// A key refusal (401) keeps its code in Anthropic's shape too: by it
	// alone an Anthropic client tells a revoked or expired key from an
	// unknown one. Other refusals keep Anthropic's two members.
	return e.shape.Render(&family.Error{Status: e.status, Message: e.message, Type: e.typ, Code: e.code, Param: e.param,
		WithCode: e.status == http.StatusUnauthorized})
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

// localError is the ImmediateResponse of an upstream attempt: marked so the
// router-level filter knows it is already in the client's shape.
func localError(e *apiError) *extprocv3.ProcessingResponse {
	return e.withHeader(contract.HeaderLocal, e.code).response()
}
