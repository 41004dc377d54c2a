package envoysim

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// firstSent tracks whether request_attributes were sent already;
	// configSent whether protocol_config was.
	firstSent, configSent bool
	// md is the stream's dynamic metadata, shared by every filter of the
	// request.
	md *dynMetadata
	// down is closed when the downstream request is gone.
	down <-chan struct{}
}

type recvResult struct {
	resp *extprocv3.ProcessingResponse
	err  error
}

func (s *Sim) openFilter(ctx context.Context, f *Filter, md *dynMetadata) (*filterRun, error) {
	run := &filterRun{f: f, sim: s, md: md, mode: proto.Clone(f.Mode).(*extprocfilter.ProcessingMode)}
	target := f.Target
	if len(f.Targets) > 0 {
		target = f.Targets[int(s.stats.streams.Load())%len(f.Targets)]
	}
	conn, err := s.conn(target)
	if err != nil {
		return nil, err
	}
	gmd := metadata.MD{}
	for k, v := range f.InitialMetadata {
		gmd.Set(k, v)
	}
	sctx, cancel := context.WithCancel(metadata.NewOutgoingContext(context.WithoutCancel(ctx), gmd))
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(sctx, grpc.WaitForReady(false))
	if err != nil {
		cancel()
		return nil, err
	}
	run.cancel, run.stream = cancel, st
	// The downstream request going away destroys the filter, which closes
	// the stream at once without waiting for the answer (ext_proc.cc
	// Filter::onDestroy -> closeStreamMaybeGraceful -> closeStream, v1.38.0).
	run.down = ctx.Done()
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

// errDownstreamGone: the client went away while an answer was awaited.
var errDownstreamGone = errors.New("envoysim: downstream request gone")

// exchange sends one message and waits for its answer, bounded by
// message_timeout, as ext_proc.cc Filter::onReceiveMessage (v1.38.0) reads
// the answers:
//   - every request message carries metadata_context built from the
//     stream's dynamic metadata for metadata_options.forwarding_namespaces
//     (Filter::addDynamicMetadata, called from buildHeaderRequest and
//     setupBodyChunk);
//   - an answer with override_message_timeout only restarts the timer;
//   - mode_override is applied only while a headers answer is awaited and
//     allow_mode_override is set (DEFAULT header modes keep the current
//     ones, body modes are always taken: effectiveModeOverride) — and the
//     message is then handled by its response case like any other, so a
//     standalone mode_override (no response case) is a spurious message;
//   - an answer for another phase is spurious (stat spurious_msgs_received);
//   - dynamic metadata is merged into the stream only from a non-spurious
//     answer (setDecoderDynamicMetadata / setEncoderDynamicMetadata).
func (r *filterRun) exchange(req *extprocv3.ProcessingRequest, want string) (*extprocv3.ProcessingResponse, error) {
	// Every message carries metadata_context, empty when nothing is
	// forwarded; the stream's first message also carries protocol_config,
	// the body modes the filter runs with (seen on 1.38.3 and 1.40.0:
	// TestModelAgainstEnvoy).
	req.MetadataContext = r.md.forward(r.f.ForwardingNamespaces)
	if !r.configSent {
		r.configSent = true
		req.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: r.mode.GetRequestBodyMode(), ResponseBodyMode: r.mode.GetResponseBodyMode()}
	}
	if err := r.stream.Send(req); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	to := r.f.MessageTimeout
	if to == 0 {
		to = defaultMessageTimeout
	}
	t := time.NewTimer(to)
	defer t.Stop()
	headerState := want == "request_headers" || want == "response_headers"
	extended := false
	// Only while the request is still being decoded: later, Go's server
	// also ends the request context when the handler finishes normally,
	// which is not a downstream reset.
	var down <-chan struct{}
	if want == "request_headers" || want == "request_body" {
		down = r.down
	}
	for {
		select {
		case res := <-r.recv:
			if res.err != nil {
				return nil, res.err
			}
			resp := res.resp
			if d := resp.GetOverrideMessageTimeout(); d != nil {
				// Filter::onNewTimeout: honoured only from 1 ms up to
				// max_message_timeout (zero: never), and only once per
				// message: ProcessorState::restartMessageTimer sets
				// new_timeout_received_, cleared only when the next call
				// starts or this one finishes (processor_state.cc, v1.38.0).
				// The timer restarts from the override's arrival.
				if nd := d.AsDuration(); !extended && r.f.MaxMessageTimeout > 0 && nd >= time.Millisecond && nd <= r.f.MaxMessageTimeout {
					t.Reset(nd)
					extended = true
				}
				continue
			}
			if ov := resp.GetModeOverride(); ov != nil && headerState && r.f.AllowModeOverride {
				r.mode = effectiveModeOverride(ov, r.mode)
			}
			phase := phaseOf(resp)
			if phase != "immediate_response" && phase != want {
				r.sim.stats.spurious.Add(1)
				return nil, fmt.Errorf("%w: got %s, want %s", errSpurious, phase, want)
			}
			r.keepMetadata(resp)
			return resp, nil
		case <-t.C:
			r.sim.stats.messageTimeouts.Add(1)
			return nil, errMessageTimeout
		case <-down:
			r.cancel()
			return nil, errDownstreamGone
		}
	}
}

// effectiveModeOverride follows ext_proc.cc effectiveModeOverride (v1.38.0).
func effectiveModeOverride(ov, cur *extprocfilter.ProcessingMode) *extprocfilter.ProcessingMode {
	m := proto.Clone(cur).(*extprocfilter.ProcessingMode)
	if ov.GetRequestHeaderMode() != extprocfilter.ProcessingMode_DEFAULT {
		m.RequestHeaderMode = ov.GetRequestHeaderMode()
	}
	if ov.GetResponseHeaderMode() != extprocfilter.ProcessingMode_DEFAULT {
		m.ResponseHeaderMode = ov.GetResponseHeaderMode()
	}
	if ov.GetRequestTrailerMode() != extprocfilter.ProcessingMode_DEFAULT {
		m.RequestTrailerMode = ov.GetRequestTrailerMode()
	}
	if ov.GetResponseTrailerMode() != extprocfilter.ProcessingMode_DEFAULT {
		m.ResponseTrailerMode = ov.GetResponseTrailerMode()
	}
	m.RequestBodyMode = ov.GetRequestBodyMode()
	m.ResponseBodyMode = ov.GetResponseBodyMode()
	return m
}

// keepMetadata merges the answer's dynamic metadata into the stream's, for
// the receiving namespaces only (ext_proc.cc Filter::setDynamicMetadata,
// v1.38.0). The upstream filter's stream info is the downstream one
// (upstream_request.cc UpstreamFilterManager::streamInfo, v1.38.0), so both
// filters write into the same place.
func (r *filterRun) keepMetadata(resp *extprocv3.ProcessingResponse) {
	dm := resp.GetDynamicMetadata()
	if dm == nil {
		return
	}
	for ns, v := range dm.GetFields() {
		if !slices.Contains(r.f.ReceivingNamespaces, ns) || r.md == nil {
			r.sim.stats.droppedMetadata.Add(1)
			continue
		}
		r.md.merge(ns, v.GetStructValue())
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
