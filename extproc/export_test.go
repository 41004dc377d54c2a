package extproc

import (
	"context"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// RouterExchange drives the router-level handler without gRPC, for the
// fuzz test and benchmarks.
type RouterExchange struct {
	s *Server
	r *routerStream
}

func (s *Server) NewRouterExchange() *RouterExchange {
	r := s.routers.Get().(*routerStream)
	r.reset()
	r.cfg = s.cfg.Load()
	return &RouterExchange{s: s, r: r}
}

func (x *RouterExchange) Handle(ctx context.Context, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	return x.s.handleRouter(ctx, x.r, req)
}

// End finishes the stream as serveRouter does and returns the state to the
// pool.
func (x *RouterExchange) End() {
	x.s.finish(x.r, true)
	x.s.routers.Put(x.r)
	x.r = nil
}

// Admitted is what an attempt reads from an admission token (tests).
type Admitted struct {
	RequestID, Model, Sticky, Path, Backends string
	EstTokens, MaxTokens, BodyBytes          int
}

// ReadAdmission verifies and reads an admission namespace as an upstream
// attempt would.
func (s *Server) ReadAdmission(md *structpb.Struct) (Admitted, bool) {
	a, _, ok := readAdmitted(md, s.signer(s.Config()), s.opts.Now(), nil)
	return Admitted{RequestID: a.requestID, Model: a.model, Sticky: a.sticky, Path: a.path, Backends: a.backends,
		EstTokens: a.estTokens, MaxTokens: a.maxTokens, BodyBytes: a.bodyBytes}, ok
}
