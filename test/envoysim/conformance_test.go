package envoysim

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Conformance tests: each drives one Envoy 1.38 behaviour (docs/envoy-behaviour.md)
// through scripted servers and real sockets.

func startSim(t *testing.T, cfg Config) *Sim {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := s.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return s
}

func waitRecord(t *testing.T, s *Sim, id string) Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := s.WaitRecord(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func upstreamFilter(addr string, reqBody extprocfilter.ProcessingMode_BodySendMode) *Filter {
	return &Filter{Target: addr, InitialMetadata: map[string]string{"role": "upstream"}, MessageTimeout: time.Second,
		AllowAllRouting: true, Mode: &extprocfilter.ProcessingMode{RequestHeaderMode: extprocfilter.ProcessingMode_SEND,
			ResponseHeaderMode: extprocfilter.ProcessingMode_SEND, RequestBodyMode: reqBody}}
}

func routerFilter(addr string) *Filter {
	return &Filter{Target: addr, InitialMetadata: map[string]string{"role": "router"}, MessageTimeout: time.Second,
		Mode: modes(extprocfilter.ProcessingMode_BUFFERED, extprocfilter.ProcessingMode_STREAMED)}
}

var retry429 = &RetryPolicy{RetryOn: []string{"retriable-status-codes"}, RetriableStatusCodes: []int{429}, NumRetries: 2,
	BackoffBase: time.Millisecond, PreviousHosts: true}

// Behaviour 1: upstream_request.cc UpstreamRequest::acceptHeadersFromRouter
// (v1.38.0) hands every attempt's upstream filters the router's own header
// map; router.cc Filter::continueDoRetry copies the body per attempt.
func TestOneHeaderMapPerRequest(t *testing.T) {
	p, addr := startScript(t, func(role string, n int, req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
		if role != "upstream" {
			return one(pass(req))
		}
		switch req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			// Each attempt removes the hint and tags itself.
			return one(answerWith(req, &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
				RemoveHeaders: []string{"x-key-hint"},
				SetHeaders:    []*corev3.HeaderValueOption{setRaw("x-attempt-"+string(rune('0'+n)), "1"), setRaw(":path", "/attempt")}}}))
		case *extprocv3.ProcessingRequest_RequestBody:
			return one(answerWith(req, &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
				Mutation: &extprocv3.BodyMutation_Body{Body: []byte("MUTATED!")}}}))
		}
		return one(pass(req))
	})
	up := newUpstream(t, func(n int) int { return map[bool]int{true: 429, false: 200}[n == 1] })
	s := startSim(t, Config{Routes: []Route{{Name: "r", Cluster: "c", Retry: retry429, AutoHostRewrite: true}},
		Clusters: []Cluster{{Name: "c", Endpoints: []Endpoint{{Address: up.addr(), Hostname: "api.example"}},
			UpstreamFilter: upstreamFilter(addr, extprocfilter.ProcessingMode_BUFFERED)}}})
	resp, _ := do(t, s, map[string]string{"x-key-hint": "k1", "x-request-id": "one-map"}, "original")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	hs := p.seen("upstream", "request_headers")
	if len(hs) != 2 {
		t.Fatalf("upstream request_headers messages: %d", len(hs))
	}
	second := hs[1].req
	if _, ok := reqHeader(second, "x-key-hint"); ok {
		t.Error("attempt 2 still saw the header attempt 1 removed")
	}
	if v, _ := reqHeader(second, "x-attempt-1"); v != "1" {
		t.Error("attempt 2 did not see attempt 1's header")
	}
	if v, _ := reqHeader(second, ":authority"); v != "api.example" {
		t.Errorf("attempt 2 :authority %q", v)
	}
	// The body is a fresh copy per attempt: attempt 2's filter gets the
	// original, not attempt 1's mutation.
	if bs := p.seen("upstream", "request_body"); len(bs) != 2 || string(bs[1].req.GetRequestBody().GetBody()) != "original" {
		t.Errorf("attempt bodies %v", bs)
	}
	rec := waitRecord(t, s, "one-map")
	if len(rec.Attempts) != 2 || rec.Attempts[1].Path != "/attempt" || rec.Attempts[1].Header.Get("x-attempt-1") != "1" ||
		rec.Attempts[1].Header.Get("x-envoy-original-host") != "api.example" {
		t.Errorf("attempts %+v", rec.Attempts)
	}
	if rec.RequestHeader.Get("x-key-hint") != "" || rec.RequestHeader.Get("x-attempt-2") != "1" {
		t.Errorf("final request headers %v", rec.RequestHeader)
	}
	if up.body[0] != "MUTATED!" || up.body[1] != "MUTATED!" {
		t.Errorf("upstream bodies %q", up.body)
	}
}

// Behaviour 4: an upstream filter's ImmediateResponse (or error without
// failure_mode_allow) is the client's answer, not retried (v1.36.0 on), and
// passes the router-level ext_proc's encode path (filter_manager.cc
// sendLocalReplyViaFilterChain, v1.38.0).
func TestUpstreamLocalReply(t *testing.T) {
	tests := []struct {
		name       string
		upstream   func(req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse
		wantStatus int
	}{
		{"ImmediateResponse on request headers", func(req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
			if req.GetRequestHeaders() != nil {
				return one(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
					Status: &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}, Body: []byte("no key")}}})
			}
			return one(pass(req))
		}, 503},
		{"ImmediateResponse on response headers", func(req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
			if req.GetResponseHeaders() != nil {
				return one(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
					Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests}}}})
			}
			return one(pass(req))
		}, 429},
		{"spurious answer without failure_mode_allow: status_on_error", func(req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
			if req.GetRequestHeaders() != nil {
				return one(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}})
			}
			return one(pass(req))
		}, 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, addr := startScript(t, func(role string, _ int, req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
				if role == "upstream" {
					return tc.upstream(req)
				}
				return one(pass(req))
			})
			up := newUpstream(t, func(int) int { return 429 })
			s := startSim(t, Config{Routes: []Route{{Name: "r", Cluster: "c", Retry: retry429}}, RouterFilter: routerFilter(addr),
				Clusters: []Cluster{{Name: "c", Endpoints: []Endpoint{{Address: up.addr()}}, UpstreamFilter: upstreamFilter(addr, extprocfilter.ProcessingMode_NONE)}}})
			resp, _ := do(t, s, map[string]string{"x-request-id": "lr"}, "b")
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			rec := waitRecord(t, s, "lr")
			if len(rec.Attempts) != 1 || !rec.UpstreamLocalReply {
				t.Errorf("retried or not marked: %+v", rec)
			}
			rh := p.seen("router", "response_headers")
			if len(rh) != 1 {
				t.Fatalf("router-level ext_proc saw %d response_headers", len(rh))
			}
			if v, _ := reqHeader(rh[0].req, ":status"); v != strconv.Itoa(tc.wantStatus) {
				t.Errorf("router-level ext_proc saw status %q", v)
			}
		})
	}
}
