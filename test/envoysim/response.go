package envoysim

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// respondLocal sends a local reply. In v1.38.0 a local reply sent before
// the response started goes through every encoder filter
// (filter_manager.cc DownstreamFilterManager::sendLocalReply →
// sendLocalReplyViaFilterChain, encodeHeaders(nullptr, ...)): the
// rate-limit filter adds its headers and the router-level ext_proc
// processes it like an upstream response (ext_proc.cc Filter::encodeHeaders
// has no local-reply exception) — Envoy's own replies (no healthy upstream,
// the rate-limit 429, 413) and an upstream filter's ImmediateResponse alike.
// Only the router-level ext_proc's own ImmediateResponse or error reply
// skips it (processing_complete_).
// The HCM's local_reply_config mappers rewrite it first (localreply.go).
func (x *exchange) respondLocal(ctx context.Context, lr *localReply) {
	x.rec.LocalReply = true
	x.s.localReply.rewrite(x, lr)
	h := append(headers{{":status", strconv.Itoa(lr.status)}}, lr.header...)
	if !h.has("content-type") && len(lr.body) > 0 {
		h.add("content-type", "text/plain")
	}
	if lr.fromFilter {
		x.router.close(false)
		x.router = nil
	}
	// An empty local reply carries no content-length through the filters
	// (the codec frames it); one with a body does.
	if !h.has("content-length") && len(lr.body) > 0 {
		h.add("content-length", strconv.Itoa(len(lr.body)))
	}
	if len(lr.body) == 0 {
		x.emptyLocal = true
	}
	x.respond(ctx, h, singleChunk(lr.body), nil)
}

// respondUpstream streams the chosen upstream response back.
func (x *exchange) respondUpstream(ctx context.Context, res routeResult) {
	defer res.cancel()
	defer res.resp.Body.Close()
	x.respond(ctx, res.header, res.resp.Body, res.resp)
}

type singleChunkReader struct {
	b    []byte
	done bool
}

func singleChunk(b []byte) io.Reader { return &singleChunkReader{b: b} }

func (r *singleChunkReader) Read(p []byte) (int, error) {
	if r.done || len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	if len(r.b) == 0 {
		// The end comes with the last bytes: a local reply's body is one
		// data frame with end_stream (one ext_proc message).
		r.done = true
		return n, io.EOF
	}
	return n, nil
}

// respond runs the router-level filter's response phases and writes the
// response downstream, chunk by chunk as the upstream delivers it.
func (x *exchange) respond(ctx context.Context, h headers, body io.Reader, upstream *http.Response) {
	if ctx.Err() != nil {
		// The client went away before any response: Envoy resets the stream
		// (response code detail downstream_remote_disconnect,
		// https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_conn_man/response_code_details)
		// and destroys its filter chain, so no filter sees a response phase,
		// not even of the local reply the router would have sent; the
		// router-level ext_proc stream is closed without end_of_stream.
		x.rec.Aborted = true
		if x.router != nil {
			x.router.close(true)
		}
		return
	}
	run := x.router
	if run != nil && run.off {
		run = nil
	}
	mode := &extprocfilter.ProcessingMode{}
	if run != nil {
		mode = run.mode
	}
	x.addRateLimitHeaders(&h)
	status, _ := strconv.Atoi(h.get(":status"))
	noBody := (upstream != nil && upstream.ContentLength == 0) || x.req.get(":method") == http.MethodHead ||
		(upstream == nil && (h.get("content-length") == "0" || x.emptyLocal))
	if run != nil && mode.GetResponseHeaderMode() != extprocfilter.ProcessingMode_SKIP {
		resp, err := run.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
			ResponseHeaders: &extprocv3.HttpHeaders{Headers: h.proto(), EndOfStream: noBody}}}, "response_headers")
		switch {
		case err != nil:
			if lr := x.filterFailed(err); lr != nil {
				x.writeAll(lr.status, append(headers{{":status", strconv.Itoa(lr.status)}}, lr.header...), lr.body)
				return
			}
			run = nil
		case resp.GetImmediateResponse() != nil:
			lr := immediate(resp.GetImmediateResponse())
			x.s.localReply.rewrite(x, lr)
			x.router.close(false)
			x.writeAll(lr.status, append(headers{{":status", strconv.Itoa(lr.status)}}, lr.header...), lr.body)
			return
		default:
			n, merr := run.f.applyMutation(&h, common(resp).GetHeaderMutation(), x.s.cfg.EnvoyHeaderPrefix)
			x.s.stats.rejectedMutations.Add(int64(n))
			if merr != nil {
				lr := x.filterFailed(merr)
				x.writeAll(lr.status, append(headers{{":status", strconv.Itoa(lr.status)}}, lr.header...), lr.body)
				return
			}
			mode = run.mode
		}
	}
	if s, err := strconv.Atoi(h.get(":status")); err == nil {
		status = s
	}
	bodyMode := extprocfilter.ProcessingMode_NONE
	if run != nil && !noBody {
		bodyMode = mode.GetResponseBodyMode()
	}
	// Envoy removes the upstream's content-length when the processor may
	// change the body's length later: STREAMED, or BUFFERED with response
	// headers not sent (ProcessorState::shouldRemoveContentLength,
	// source/extensions/filters/http/ext_proc/processor_state.h; applied in
	// Filter::encodeHeaders, ext_proc.cc; v1.38.0). BUFFERED with headers
	// sent keeps it: the processor must keep it right (see bufferedResponse).
	if bodyMode == extprocfilter.ProcessingMode_STREAMED ||
		(bodyMode == extprocfilter.ProcessingMode_BUFFERED && mode.GetResponseHeaderMode() == extprocfilter.ProcessingMode_SKIP) {
		h.del("content-length")
	}
	if bodyMode == extprocfilter.ProcessingMode_BUFFERED {
		x.bufferedResponse(run, h, status, body)
		return
	}
	x.rec.Status = status
	serverHeader(&h)
	wh := x.w.Header()
	for _, e := range h {
		if !strings.HasPrefix(e.key, ":") {
			wh.Add(e.key, e.value)
		}
	}
	flusher, _ := x.w.(http.Flusher)
	head := func() {
		x.w.WriteHeader(status)
		if !h.has("content-length") && !noBody && flusher != nil {
			// Without a content-length Envoy frames the body chunked;
			// flushing now keeps Go's server from adding one for a short
			// body.
			flusher.Flush()
		}
	}
	// The headers go downstream at once, before any body chunk, in STREAMED
	// mode too, on 1.38.3 and 1.40.0 alike (TestModelAgainstEnvoy "STREAMED
	// response headers and a late body").
	head()
	write := func(out []byte) error {
		_, err := x.w.Write(out)
		return err
	}
	// With a content-length, bytes that arrive with the end of the
	// response go in one message with end_of_stream: the HTTP/1 codec
	// dispatches the body buffered in a read at message complete. A chunked
	// body is dispatched at the last chunk's header, before the message
	// completes, so the end comes as an empty message (codec_impl.cc
	// ConnectionImpl::onChunkHeader, v1.38.0). A local reply is one frame.
	mergeEnd := upstream == nil || upstream.ContentLength >= 0

	switch bodyMode {
	case extprocfilter.ProcessingMode_STREAMED:
	default:
		_, err := io.Copy(flushWriter{x.w, flusher}, body)
		if err != nil {
			x.rec.Aborted = true
		}
		if run != nil {
			run.close(err != nil)
		}
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			eos := mergeEnd && errors.Is(err, io.EOF)
			out, ok := x.bodyChunk(run, buf[:n], eos)
			if !ok {
				return
			}
			if eos {
				_ = write(out)
				run.close(false)
				return
			}
			if werr := write(out); werr != nil || ctx.Err() != nil {
				// Downstream gone: Envoy resets the ext_proc stream without
				// end_of_stream.
				x.rec.Aborted = true
				run.close(true)
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			x.abort(run)
			return
		}
	}
	out, ok := x.bodyChunk(run, nil, true)
	if !ok {
		return
	}
	_ = write(out)
	run.close(false)
}

// bufferedResponse is a BUFFERED response body: the headers wait for the
// body's answer, which may still change them (ext_proc.cc Filter::encodeData
// holds the headers, v1.38.0). A content-length that no longer matches the
// body, an error without failure_mode_allow or an ImmediateResponse answer
// the client instead: the filter's own replies, so the encode path does not
// run again (1.38.3 and 1.40.0 answer a stale content-length with an empty
// 500: TestModelAgainstEnvoy "BUFFERED response with headers sent keeps
// content-length").
func (x *exchange) bufferedResponse(run *filterRun, h headers, status int, body io.Reader) {
	all, err := io.ReadAll(body)
	if err != nil {
		x.abort(run)
		return
	}
	reply := func(lr *localReply) {
		x.s.localReply.rewrite(x, lr)
		x.writeAll(lr.status, append(headers{{":status", strconv.Itoa(lr.status)}}, lr.header...), lr.body)
	}
	resp, err := run.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: all, EndOfStream: true}}}, "response_body")
	out := all
	switch {
	case err != nil:
		if lr := x.filterFailed(err); lr != nil {
			reply(&localReply{status: lr.status})
			return
		}
	case resp.GetImmediateResponse() != nil:
		run.close(false)
		reply(immediate(resp.GetImmediateResponse()))
		return
	default:
		cr := common(resp)
		n, merr := run.f.applyMutation(&h, cr.GetHeaderMutation(), x.s.cfg.EnvoyHeaderPrefix)
		x.s.stats.rejectedMutations.Add(int64(n))
		if merr != nil {
			reply(&localReply{status: x.filterFailed(merr).status})
			return
		}
		applyBody(&out, cr.GetBodyMutation())
		if cl := h.get("content-length"); h.has("content-length") && cl != strconv.Itoa(len(out)) {
			run.close(false)
			reply(&localReply{status: http.StatusInternalServerError})
			return
		}
		if s, err := strconv.Atoi(h.get(":status")); err == nil {
			status = s
		}
		run.close(false)
	}
	x.writeAll(status, h, out)
}

// bodyChunk sends one response body message and returns the (possibly
// mutated) bytes to forward.
func (x *exchange) bodyChunk(run *filterRun, b []byte, eos bool) ([]byte, bool) {
	resp, err := run.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}, "response_body")
	if err != nil {
		if run.f.FailureModeAllow {
			x.s.stats.failOpen.Add(1)
			run.off = true
			return b, true
		}
		// Headers are already downstream: Envoy can only reset.
		x.abort(run)
		return nil, false
	}
	if resp.GetImmediateResponse() != nil {
		x.abort(run)
		return nil, false
	}
	out := b
	applyBody(&out, common(resp).GetBodyMutation())
	return out, true
}

// abort resets the downstream stream mid-response, as Envoy does after an
// upstream reset once headers were sent.
func (x *exchange) abort(run *filterRun) {
	x.rec.Aborted = true
	run.close(true)
	panic(http.ErrAbortHandler)
}

func (x *exchange) writeAll(status int, h headers, body []byte) {
	x.rec.Status = status
	serverHeader(&h)
	for _, e := range h {
		if !strings.HasPrefix(e.key, ":") {
			x.w.Header().Add(e.key, e.value)
		}
	}
	x.w.WriteHeader(status)
	_, _ = x.w.Write(body)
}

// serverHeader is the HCM's last word on every response
// (ConnectionManagerUtility::mutateResponseHeaders, server_header_transformation
// OVERWRITE by default): after every filter, so no ext_proc sees it.
func serverHeader(h *headers) { h.set("server", "envoy") }

type flushWriter struct {
	w http.ResponseWriter
	f http.Flusher
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if f.f != nil {
		f.f.Flush()
	}
	return n, err
}
