package envoymsg

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// answerSets is how many header options an answer carries without
// allocating; more still work, allocated.
const answerSets = 12

// Answer is a stream's reusable headers/body answer. Envoy sends a
// stream's next message only after our answer to the last one, and gRPC
// marshals an answer inside Send, so one set of messages per stream is
// enough: reset per message, with the header options carved from arrays.
// It saves some twenty allocations per request, and the GC work with them.
type Answer struct {
	resp    extprocv3.ProcessingResponse
	reqH    extprocv3.ProcessingResponse_RequestHeaders
	reqB    extprocv3.ProcessingResponse_RequestBody
	respH   extprocv3.ProcessingResponse_ResponseHeaders
	headers extprocv3.HeadersResponse
	body    extprocv3.BodyResponse
	common  extprocv3.CommonResponse
	mut     extprocv3.HeaderMutation
	bmut    extprocv3.BodyMutation
	bmutB   extprocv3.BodyMutation_Body

	setPtrs [answerSets]*corev3.HeaderValueOption
	opts    [answerSets]corev3.HeaderValueOption
	vals    [answerSets]corev3.HeaderValue
	used    int
	removes [16]string
	raw     []byte // header value bytes of the current answer
}

// Phase is which message an answer answers.
type Phase uint8

// The phases an Answer answers.
const (
	RequestHeaders Phase = iota
	RequestBody
	ResponseHeaders
	// The phases below have no reusable Answer (Continue only).
	ResponseBody
	RequestTrailers
	ResponseTrailers
)

// Start resets the answer for one message of the given phase and returns
// the response and its CommonResponse, whose HeaderMutation is ready to
// fill.
func (a *Answer) Start(phase Phase) (*extprocv3.ProcessingResponse, *extprocv3.CommonResponse) {
	for i := range a.used {
		a.opts[i] = corev3.HeaderValueOption{}
		a.vals[i] = corev3.HeaderValue{}
		a.setPtrs[i] = nil
	}
	a.used = 0
	clear(a.raw) // the last answer's bytes may hold an upstream key
	a.raw = a.raw[:0]
	clear(a.removes[:])
	a.resp = extprocv3.ProcessingResponse{}
	a.headers = extprocv3.HeadersResponse{}
	a.body = extprocv3.BodyResponse{}
	a.common = extprocv3.CommonResponse{}
	a.mut = extprocv3.HeaderMutation{SetHeaders: a.setPtrs[:0], RemoveHeaders: a.removes[:0]}
	a.common.HeaderMutation = &a.mut
	switch phase {
	case RequestHeaders:
		a.headers.Response = &a.common
		a.reqH = extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &a.headers}
		a.resp.Response = &a.reqH
	case RequestBody:
		a.body.Response = &a.common
		a.reqB = extprocv3.ProcessingResponse_RequestBody{RequestBody: &a.body}
		a.resp.Response = &a.reqB
	default: // ResponseHeaders
		a.headers.Response = &a.common
		a.respH = extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &a.headers}
		a.resp.Response = &a.respH
	}
	return &a.resp, &a.common
}

// Set adds a header option (overwrite or add), like SetHeader.
func (a *Answer) Set(k, v string) {
	if a.used == len(a.opts) {
		a.mut.SetHeaders = append(a.mut.SetHeaders, SetHeader(k, v))
		return
	}
	// Values live in raw until the next start. Appending may move raw;
	// earlier values keep pointing at the old array, which stays valid.
	n := len(a.raw)
	a.raw = append(a.raw, v...)
	a.add(k, n)
}

// SetBearer sets authorization: Bearer <secret> without building the
// string (the secret is copied into the answer's bytes only).
func (a *Answer) SetBearer(secret string) {
	if a.used == len(a.opts) {
		a.mut.SetHeaders = append(a.mut.SetHeaders, SetHeader("authorization", "Bearer "+secret))
		return
	}
	n := len(a.raw)
	a.raw = append(append(a.raw, "Bearer "...), secret...)
	a.add("authorization", n)
}

// SetInt is Set with a decimal value.
func (a *Answer) SetInt(k string, v int) {
	if a.used == len(a.opts) {
		a.mut.SetHeaders = append(a.mut.SetHeaders, SetHeader(k, strconv.Itoa(v)))
		return
	}
	n := len(a.raw)
	a.raw = strconv.AppendInt(a.raw, int64(v), 10)
	a.add(k, n)
}

// add appends the option whose value is raw[n:].
func (a *Answer) add(k string, n int) {
	hv := &a.vals[a.used]
	hv.Key, hv.RawValue = k, a.raw[n:len(a.raw):len(a.raw)]
	o := &a.opts[a.used]
	o.Header, o.AppendAction = hv, corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
	a.used++
	a.mut.SetHeaders = append(a.mut.SetHeaders, o)
}

// Remove adds a header to remove.
func (a *Answer) Remove(k string) { a.mut.RemoveHeaders = append(a.mut.RemoveHeaders, k) }

// SetBody replaces the request body.
func (a *Answer) SetBody(b []byte) {
	a.bmutB = extprocv3.BodyMutation_Body{Body: b}
	a.bmut = extprocv3.BodyMutation{Mutation: &a.bmutB}
	a.common.BodyMutation = &a.bmut
}
