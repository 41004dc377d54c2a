package envoysim

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
)

// scripted answers request headers with headersResp and request bodies
// with bodyResp; every other phase continues.
type scripted struct {
	extprocv3.UnimplementedExternalProcessorServer
	headersResp func() *extprocv3.ProcessingResponse
	bodyResp    func() *extprocv3.ProcessingResponse
	// respBody answers response bodies when set.
	respBody func(*extprocv3.HttpBody) *extprocv3.ProcessingResponse
}

func (p *scripted) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		var resp *extprocv3.ProcessingResponse
		switch req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			resp = p.headersResp()
		case *extprocv3.ProcessingRequest_RequestBody:
			resp = p.bodyResp()
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
			if p.respBody != nil {
				resp = p.respBody(req.GetResponseBody())
			}
		default:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
		}
		if err := st.Send(resp); err != nil {
			return nil
		}
	}
}

func startScripted(t *testing.T, p *scripted) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, p)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

func bodyMutation(b, contentLength string) func() *extprocv3.ProcessingResponse {
	return func() *extprocv3.ProcessingResponse {
		cr := &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(b)}}}
		if contentLength != "" {
			cr.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("content-length", contentLength)}}
		}
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: cr}}}
	}
}

func headersContinue() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}
}

func TestEnvoyRules(t *testing.T) {
	immediate := func() *extprocv3.ProcessingResponse {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests}}}}
	}
	tests := []struct {
		name       string
		router     *scripted
		upstream   *scripted
		wantStatus int
		wantBody   string // what the upstream received
		check      func(t *testing.T, s *Sim)
	}{
		{name: "BUFFERED+SEND: mutated body with matching content-length",
			router: &scripted{headersResp: headersContinue, bodyResp: bodyMutation("abc", "3")}, wantStatus: 200, wantBody: "abc"},
		{name: "BUFFERED+SEND: mutated body with stale content-length is rejected",
			router: &scripted{headersResp: headersContinue, bodyResp: bodyMutation("abcdef", "")}, wantStatus: 500},
		// upstream_request.cc UpstreamFilterManager::sendLocalReply (v1.36.0
		// on): the upstream filter's ImmediateResponse is the client's answer.
		{name: "upstream ImmediateResponse reaches the client",
			router:     &scripted{headersResp: headersContinue, bodyResp: bodyMutation("original", "")},
			upstream:   &scripted{headersResp: immediate, bodyResp: bodyMutation("x", "1")},
			wantStatus: 429,
			check: func(t *testing.T, s *Sim) {
				if s.Stats().UpstreamImmediateResponses != 1 {
					t.Errorf("stats %+v", s.Stats())
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, func(int) int { return 200 })
			cl := Cluster{Name: "a", Endpoints: []Endpoint{{Address: up.addr()}}}
			if tc.upstream != nil {
				cl.UpstreamFilter = &Filter{Target: startScripted(t, tc.upstream), MessageTimeout: time.Second,
					Mode: &extprocfilter.ProcessingMode{RequestHeaderMode: extprocfilter.ProcessingMode_SEND, ResponseHeaderMode: extprocfilter.ProcessingMode_SKIP}}
			}
			s, err := New(Config{Routes: []Route{{Name: "all", Cluster: "a"}}, Clusters: []Cluster{cl},
				RouterFilter: &Filter{Target: startScripted(t, tc.router), MessageTimeout: time.Second,
					Mode: &extprocfilter.ProcessingMode{RequestHeaderMode: extprocfilter.ProcessingMode_SEND, RequestBodyMode: extprocfilter.ProcessingMode_BUFFERED,
						ResponseHeaderMode: extprocfilter.ProcessingMode_SKIP}}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := s.Start(ctx, "127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			resp, _ := do(t, s, nil, "original")
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if tc.wantBody != "" && (len(up.body) != 1 || up.body[0] != tc.wantBody) {
				t.Errorf("upstream got %q", up.body)
			}
			if tc.wantStatus != 200 && len(up.body) != 0 {
				t.Errorf("rejected request reached the upstream: %q", strings.Join(up.body, ","))
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

// TestStreamedResponseDropsContentLength: with response_body_mode STREAMED
// Envoy removes the upstream's content-length before the headers go
// downstream (ProcessorState::shouldRemoveContentLength, processor_state.h,
// v1.38.0), so a processor may answer with a body of another length (what
// the router-level filter does when it translates an answer). With
// BUFFERED and response headers sent, content-length stays: a longer body
// under it does not reach the client whole.
func TestStreamedResponseDropsContentLength(t *testing.T) {
	longer := func(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
		out := append([]byte("<<"), b.GetBody()...)
		if b.GetEndOfStream() {
			out = append(out, ">> and more"...)
		}
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
			Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: out}}}}}}
	}
	for _, tc := range []struct {
		name  string
		mode  extprocfilter.ProcessingMode_BodySendMode
		whole bool
	}{
		{"STREAMED", extprocfilter.ProcessingMode_STREAMED, true},
		{"BUFFERED with headers sent", extprocfilter.ProcessingMode_BUFFERED, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, func(int) int { return 200 })
			s, err := New(Config{Routes: []Route{{Name: "all", Cluster: "a"}}, Clusters: []Cluster{{Name: "a", Endpoints: []Endpoint{{Address: up.addr()}}}},
				RouterFilter: &Filter{Target: startScripted(t, &scripted{headersResp: headersContinue, respBody: longer}), MessageTimeout: time.Second,
					Mode: &extprocfilter.ProcessingMode{RequestHeaderMode: extprocfilter.ProcessingMode_SEND, ResponseHeaderMode: extprocfilter.ProcessingMode_SEND,
						ResponseBodyMode: tc.mode}}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := s.Start(ctx, "127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/x", strings.NewReader("x"))
			resp, err := http.DefaultClient.Do(req)
			var body []byte
			if err == nil {
				body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			got := string(body)
			whole := err == nil && strings.HasPrefix(got, "<<hello from") && strings.HasSuffix(got, ">> and more")
			if whole != tc.whole {
				t.Fatalf("whole=%v, want %v (body %q, err %v)", whole, tc.whole, got, err)
			}
			if tc.whole && resp.Header.Get("content-length") != "" {
				t.Errorf("content-length %q reached the client", resp.Header.Get("content-length"))
			}
		})
	}
}
