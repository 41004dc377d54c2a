package baseline

import (
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

func TestContinueMatchesPhase(t *testing.T) {
	tests := []struct {
		name string
		req  *extprocv3.ProcessingRequest
		ok   func(*extprocv3.ProcessingResponse) bool
	}{
		{"request headers", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{}},
			func(r *extprocv3.ProcessingResponse) bool { return r.GetRequestHeaders() != nil }},
		{"request body", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{}},
			func(r *extprocv3.ProcessingResponse) bool { return r.GetRequestBody() != nil }},
		{"request trailers", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{}},
			func(r *extprocv3.ProcessingResponse) bool { return r.GetRequestTrailers() != nil }},
		{"response headers", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{}},
			func(r *extprocv3.ProcessingResponse) bool { return r.GetResponseHeaders() != nil }},
		{"response body", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{}},
			func(r *extprocv3.ProcessingResponse) bool { return r.GetResponseBody() != nil }},
		{"response trailers", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{}},
			func(r *extprocv3.ProcessingResponse) bool { return r.GetResponseTrailers() != nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if r := Continue(tc.req); !tc.ok(r) {
				t.Fatalf("Continue answered %T", r.GetResponse())
			}
		})
	}
}
