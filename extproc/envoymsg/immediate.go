package envoymsg

import (
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Header is one header of a local reply.
type Header struct{ Key, Value string }

// Immediate is the ImmediateResponse Envoy turns into a local reply
// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/service/ext_proc/v3/external_processor.proto#envoy-v3-api-msg-service-ext-proc-v3-immediateresponse),
// with content-type application/json first and then hs. details, when set,
// is Envoy's response code details (access logs).
func Immediate(status int, hs []Header, body []byte, details string) *extprocv3.ProcessingResponse {
	opts := make([]*corev3.HeaderValueOption, 0, 1+len(hs))
	opts = append(opts, SetHeader("content-type", "application/json"))
	for _, h := range hs {
		opts = append(opts, SetHeader(h.Key, h.Value))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: opts},
		Body:    body,
		Details: details,
	}}}
}

// AddHeader adds a header to a local reply (nothing for other answers).
func AddHeader(resp *extprocv3.ProcessingResponse, k, v string) *extprocv3.ProcessingResponse {
	if ir := resp.GetImmediateResponse(); ir != nil {
		if ir.Headers == nil {
			ir.Headers = &extprocv3.HeaderMutation{}
		}
		ir.Headers.SetHeaders = append(ir.Headers.SetHeaders, SetHeader(k, v))
	}
	return resp
}

// Continue is the empty answer for phases the data path passes through.
func Continue(phase Phase) *extprocv3.ProcessingResponse {
	switch phase {
	case RequestBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
	case ResponseBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
	case RequestTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
	case ResponseTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
	}
	return &extprocv3.ProcessingResponse{}
}

// ReplaceBody is a request-body answer that replaces the body, with its
// content-length.
func ReplaceBody(body []byte, contentLength string) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{SetHeader("content-length", contentLength)}},
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}},
		}}}}
}

// TimeoutOverride is an answer carrying only override_message_timeout: it
// restarts the message timer of the message being processed with d
// (Envoy honours the first per message).
func TimeoutOverride(d time.Duration) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(d)}
}
