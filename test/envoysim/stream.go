package envoysim

import (
	"context"
	"errors"
	"fmt"
	"time"

	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Envoy's default message_timeout
// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/filters/http/ext_proc/v3/ext_proc.proto#envoy-v3-api-field-extensions-filters-http-ext-proc-v3-externalprocessor-message-timeout).
const defaultMessageTimeout = 200 * time.Millisecond

var (
	errMessageTimeout = errors.New("ext_proc message timeout")
	errSpurious       = errors.New("ext_proc spurious response")
)

// filterRun is one ext_proc stream of one filter instance (one request at
// router level, one attempt at upstream level).
type filterRun struct {
	f      *Filter
	sim    *Sim
	mode   *extprocfilter.ProcessingMode
	cancel context.CancelFunc
	stream extprocv3.ExternalProcessor_ProcessClient
	recv   chan recvResult
	// off is set once the filter stops processing: failure_mode_allow after
	// an error, or the stream was closed.
	off bool
	// firstSent tracks whether request_attributes were sent already.
	firstSent bool
	metadata  map[string]map[string]any
}

type recvResult struct {
	resp *extprocv3.ProcessingResponse
	err  error
}

func (s *Sim) openFilter(ctx context.Context, f *Filter) (*filterRun, error) {
	run := &filterRun{f: f, sim: s, mode: proto.Clone(f.Mode).(*extprocfilter.ProcessingMode)}
	target := f.Target
	if len(f.Targets) > 0 {
		target = f.Targets[int(s.stats.streams.Load())%len(f.Targets)]
	}
	conn, err := s.conn(target)
	if err != nil {
		return nil, err
	}
	md := metadata.MD{}
	for k, v := range f.InitialMetadata {
		md.Set(k, v)
	}
	sctx, cancel := context.WithCancel(metadata.NewOutgoingContext(context.WithoutCancel(ctx), md))
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(sctx, grpc.WaitForReady(false))
	if err != nil {
		cancel()
		return nil, err
	}
	run.cancel, run.stream = cancel, st
	run.recv = make(chan recvResult, 4)
	s.stats.streams.Add(1)
	go func() {
		for {
			resp, err := st.Recv()
			run.recv <- recvResult{resp, err}
			if err != nil {
				return
			}
		}
	}()
	return run, nil
}

// close ends the stream as Envoy does when the filter is destroyed: a
// half-close after the last message, a reset when processing stopped early.
func (r *filterRun) close(reset bool) {
	if r == nil || r.stream == nil {
		return
	}
	if reset {
		r.cancel()
	} else {
		_ = r.stream.CloseSend()
		// Let the server see the half-close before the context goes.
		go func(c context.CancelFunc, ch chan recvResult) {
			t := time.NewTimer(5 * time.Second)
			defer t.Stop()
			for {
				select {
				case res := <-ch:
					if res.err != nil {
						c()
						return
					}
				case <-t.C:
					c()
					return
				}
			}
		}(r.cancel, r.recv)
	}
	r.stream = nil
}

// exchange sends one message and waits for its answer, bounded by
// message_timeout. Dynamic metadata on the answer is kept only for
// receiving namespaces
// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/filters/http/ext_proc/v3/ext_proc.proto#envoy-v3-api-msg-extensions-filters-http-ext-proc-v3-metadataoptions).
func (r *filterRun) exchange(req *extprocv3.ProcessingRequest, want string) (*extprocv3.ProcessingResponse, error) {
	if err := r.stream.Send(req); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	to := r.f.MessageTimeout
	if to == 0 {
		to = defaultMessageTimeout
	}
	t := time.NewTimer(to)
	defer t.Stop()
	for {
		select {
		case res := <-r.recv:
			if res.err != nil {
				return nil, res.err
			}
			resp := res.resp
			r.keepMetadata(resp)
			if resp.GetResponse() == nil && resp.GetModeOverride() != nil && want == "request_headers" {
				// A standalone mode_override before the headers answer
				// (ProcessingResponse.mode_override, case 2).
				if r.f.AllowModeOverride {
					r.mode = resp.GetModeOverride()
				}
				continue
			}
			if resp.GetImmediateResponse() == nil && phaseOf(resp) != want {
				return nil, fmt.Errorf("%w: got %s, want %s", errSpurious, phaseOf(resp), want)
			}
			return resp, nil
		case <-t.C:
			r.sim.stats.messageTimeouts.Add(1)
			return nil, errMessageTimeout
		}
	}
}

func (r *filterRun) keepMetadata(resp *extprocv3.ProcessingResponse) {
	dm := resp.GetDynamicMetadata()
	if dm == nil {
		return
	}
	for ns, v := range dm.GetFields() {
		kept := false
		for _, allowed := range r.f.ReceivingNamespaces {
			if allowed == ns {
				kept = true
			}
		}
		if !kept {
			r.sim.stats.droppedMetadata.Add(1)
			continue
		}
		if r.metadata == nil {
			r.metadata = map[string]map[string]any{}
		}
		if r.metadata[ns] == nil {
			r.metadata[ns] = map[string]any{}
		}
		for k, fv := range v.GetStructValue().GetFields() {
			r.metadata[ns][k] = fv.AsInterface()
		}
	}
}

func phaseOf(resp *extprocv3.ProcessingResponse) string {
	switch resp.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return "request_headers"
	case *extprocv3.ProcessingResponse_RequestBody:
		return "request_body"
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return "response_headers"
	case *extprocv3.ProcessingResponse_ResponseBody:
		return "response_body"
	case *extprocv3.ProcessingResponse_RequestTrailers:
		return "request_trailers"
	case *extprocv3.ProcessingResponse_ResponseTrailers:
		return "response_trailers"
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		return "immediate_response"
	}
	return "none"
}

// common returns the CommonResponse of a phase answer.
func common(resp *extprocv3.ProcessingResponse) *extprocv3.CommonResponse {
	switch x := resp.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return x.RequestHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return x.ResponseHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_RequestBody:
		return x.RequestBody.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseBody:
		return x.ResponseBody.GetResponse()
	}
	return nil
}
