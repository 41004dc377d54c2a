package envoysim

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// This file holds the scripted servers every conformance test drives the
// sim with: an ext_proc server answering from a script, and a rate-limit
// service answering from a function. Both record what they received.

// script answers one ext_proc message; it may return several messages (for
// example a standalone mode_override before the real answer). role is the
// "role" initial metadata, n counts that role's streams from 1.
type script func(role string, n int, req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse

type scriptProc struct {
	extprocv3.UnimplementedExternalProcessorServer
	answer  script
	mu      sync.Mutex
	streams map[string]int
	open    int // streams not ended yet
	got     []seenMsg
}

// seenMsg is one message the server received.
type seenMsg struct {
	role   string
	stream int
	req    *extprocv3.ProcessingRequest
}

func (p *scriptProc) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	role := strings.Join(md.Get("role"), "")
	p.mu.Lock()
	if p.streams == nil {
		p.streams = map[string]int{}
	}
	p.streams[role]++
	n := p.streams[role]
	p.open++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.open--
		p.mu.Unlock()
	}()
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		p.mu.Lock()
		p.got = append(p.got, seenMsg{role, n, proto.Clone(req).(*extprocv3.ProcessingRequest)})
		p.mu.Unlock()
		for _, resp := range p.answer(role, n, req) {
			if d, ok := delays.Load(resp); ok {
				select {
				case <-time.After(d.(time.Duration)):
				case <-st.Context().Done(): // the stream was reset meanwhile
					return nil
				}
			}
			if err := st.Send(resp); err != nil {
				return nil
			}
		}
	}
}

// delays holds the answers a script wants sent late (delayed).
var delays sync.Map

// delayed marks resp to be sent d after the answers before it.
func delayed(d time.Duration, resp *extprocv3.ProcessingResponse) *extprocv3.ProcessingResponse {
	delays.Store(resp, d)
	return resp
}

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}

// seen returns the messages of one role and phase, oldest first.
func (p *scriptProc) seen(role, phase string) []seenMsg {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []seenMsg
	for _, m := range p.got {
		if m.role == role && phaseOfReq(m.req) == phase {
			out = append(out, m)
		}
	}
	return out
}

func startScript(t *testing.T, answer script) (*scriptProc, string) {
	t.Helper()
	p := &scriptProc{answer: answer}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, p)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return p, lis.Addr().String()
}

// pass continues every phase unchanged.
func pass(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	return answerWith(req, &extprocv3.CommonResponse{})
}

// answerWith answers req's phase with cr.
func answerWith(req *extprocv3.ProcessingRequest, cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	switch req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: cr}}}
	case *extprocv3.ProcessingRequest_RequestBody:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: cr}}}
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{Response: cr}}}
	default:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: cr}}}
	}
}

func one(r *extprocv3.ProcessingResponse) []*extprocv3.ProcessingResponse {
	return []*extprocv3.ProcessingResponse{r}
}

// setRaw sets a header the way Envoy expects: raw_value, overwrite.
func setRaw(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
}

func reqHeader(req *extprocv3.ProcessingRequest, k string) (string, bool) {
	hs := req.GetRequestHeaders().GetHeaders().GetHeaders()
	if req.GetResponseHeaders() != nil {
		hs = req.GetResponseHeaders().GetHeaders().GetHeaders()
	}
	for _, h := range hs {
		if h.GetKey() == k {
			return string(h.GetRawValue()), true
		}
	}
	return "", false
}

func structOf(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// scriptRLS is a scripted rate-limit service.
type scriptRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
	answer func(*rlspb.RateLimitRequest) *rlspb.RateLimitResponse
	mu     sync.Mutex
	got    []*rlspb.RateLimitRequest
}

func (r *scriptRLS) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	r.mu.Lock()
	r.got = append(r.got, proto.Clone(req).(*rlspb.RateLimitRequest))
	r.mu.Unlock()
	if r.answer == nil {
		return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
	}
	return r.answer(req), nil
}

func startRLS(t *testing.T, r *scriptRLS) rlspb.RateLimitServiceClient {
	t.Helper()
	c, _ := startRLSAddr(t, r)
	return c
}

// startRLSAddr serves r and returns a client and the address.
func startRLSAddr(t *testing.T, r *scriptRLS) (rlspb.RateLimitServiceClient, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(gs, r)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return rlspb.NewRateLimitServiceClient(cc), lis.Addr().String()
}
