package extproc

import (
	"context"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/swarmgate/swarmgate/extproc/envoymsg"
)

// KeptTranslations is how many router translations wait for an attempt
// on this replica (tests).
func (s *Server) KeptTranslations() int {
	s.translations.mu.Lock()
	defer s.translations.mu.Unlock()
	return len(s.translations.entries)
}

// UpstreamExchange drives the upstream handler's request half without
// gRPC (benchmarks).
type UpstreamExchange struct {
	s *Server
	u *upstreamStream
}

func (s *Server) NewUpstreamExchange() *UpstreamExchange {
	return &UpstreamExchange{s: s, u: &upstreamStream{cfg: s.cfg.Load(), ans: &envoymsg.Answer{}}}
}

func (x *UpstreamExchange) Handle(ctx context.Context, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	switch v := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return x.s.upstreamHeaders(ctx, x.u, req, v.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return x.s.upstreamBody(ctx, x.u, v.RequestBody)
	}
	return nil
}
