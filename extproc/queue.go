package extproc

import (
	"context"
	"net/http"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/swarmgate/swarmgate/internal/config"
)

// admitKeys is admission's key step: nil when the request may go on, else
// the refusal. Without a queue (or admission.max_wait 0) it refuses at once
// when no key is usable, as before; with one, a request whose keys only
// lack capacity that comes back soon waits for it in the queue, and Envoy's
// message timer is extended for that wait on this stream.
func (s *Server) admitKeys(ctx context.Context, r *routerStream) *extprocv3.ProcessingResponse {
	ok, retry := s.opts.Keys.Available(r.backends)
	cfg := r.cfg
	pacer, _ := s.opts.Keys.(KeyPacer)
	pacing := cfg.Admission.Pace && pacer != nil
	if s.opts.Queue == nil || cfg.Admission.MaxWait.Duration <= 0 || (ok && !pacing) {
		if !ok {
			return s.refuse(r, errKeysExhausted(r.alias, retry, s.opts.Keys.Failing(r.backends)))
		}
		return nil
	}
	if !ok && s.opts.Keys.Failing(r.backends) {
		// A failing backend is not capacity that comes back: 503 now.
		return s.refuse(r, errKeysExhausted(r.alias, retry, true))
	}
	ext, _ := ctx.Value(timerExtensionKey{}).(*timerExtension)
	classHeader := ""
	if ext != nil {
		classHeader = ext.classHeader
	}
	req := queueRequest(cfg, r, classHeader)
	req.Session = r.sticky // request.sticky_header (x-session-id)
	if req.Session == "" && ext != nil {
		req.Session = ext.session // admission.session_header
	}
	if req.Session == "" {
		req.Session = req.Tenant + "/" + r.owner.Key.ID
	}
	req.OnWait = func() {
		// Envoy honours one override per message, from 1 ms up to the
		// filter's max_message_timeout, restarting the timer from when it
		// arrives (ext_proc.cc Filter::onNewTimeout, processor_state.cc
		// restartMessageTimer, v1.38.0): one override covering the whole
		// wait plus the answer's own message_timeout.
		if ext != nil {
			ext.extend(req.MaxWait + cfg.Request.MessageTimeout.Duration)
		}
	}
	scope := strings.Join(r.backends, ",")
	req.Scope = scope
	req.Tokens = r.estTokens + r.maxOut
	res := s.opts.Queue.Admit(ctx, req, func() (bool, time.Duration, Rate) {
		ok, ra := s.opts.Keys.Available(r.backends)
		var rate Rate
		if pacing {
			rate = pacer.Pace(r.backends)
		}
		return ok, ra, rate
	})
	if res.Admitted {
		return nil
	}
	retry = res.RetryAfter
	if res.Waited > 0 {
		// The queue's figure is as old as its last look at the keys (a
		// waiter behind the first looks only when the wait begins): when
		// the keys are still out, what they say now is the time left.
		if ok, ra := s.opts.Keys.Available(r.backends); !ok {
			retry = ra
		}
	}
	e := errKeysExhausted(r.alias, retry, false)
	if res.Waited > 0 {
		e.message = "Every upstream key for `" + r.alias + "` stayed rate limited or busy for the " + res.Waited.Round(time.Millisecond).String() +
			" this request waited (" + res.Reason + "); retry after the indicated time."
	}
	e.status = http.StatusTooManyRequests
	return s.refuse(r, e)
}

// queueRequest reads the request's class: the virtual key's, or the one the
// operator's class header names when the key lists it in header_classes.
// Nothing else a client sends chooses a class.
func queueRequest(cfg *config.Config, r *routerStream, classHeader string) QueueRequest {
	t := r.owner.Tenant
	req := QueueRequest{Tenant: t.Name, Weight: float64(max(t.Weight, 1)), MaxWait: cfg.Admission.MaxWait.Duration}
	if t.MaxWait.Duration > 0 {
		req.MaxWait = t.MaxWait.Duration
	}
	class := r.owner.Key.Class
	if classHeader != "" {
		for _, hc := range r.owner.Key.HeaderClasses {
			if hc == classHeader {
				class = hc
				break
			}
		}
	}
	if cl, ok := cfg.AdmissionClass(class); ok {
		req.Class, req.Priority = cl.Name, cl.Priority
		if cl.MaxWait.Duration > 0 {
			req.MaxWait = cl.MaxWait.Duration
		}
	}
	return req
}

// timerExtension sends a ProcessingResponse carrying only
// override_message_timeout on the router-level stream, at most once per
// message (Envoy ignores the rest). It is sent from the goroutine serving
// the stream, before that message's answer, so answers stay in order.
// It also keeps the value of admission.class_header from the request
// headers as they pass (read by admitKeys on the same goroutine).
type timerExtension struct {
	extprocv3.ExternalProcessor_ProcessServer
	ctx         context.Context
	cfg         *config.Config
	classHeader string
	session     string // admission.session_header's value
	// until is when the override sent ends (zero: none sent yet). Envoy
	// honours only the first override of a message, so a later wait on
	// the same message must end within it.
	until time.Time
}

type timerExtensionKey struct{}

func withTimerExtension(st extprocv3.ExternalProcessor_ProcessServer, cfg *config.Config) extprocv3.ExternalProcessor_ProcessServer {
	e := &timerExtension{ExternalProcessor_ProcessServer: st, cfg: cfg}
	e.ctx = context.WithValue(st.Context(), timerExtensionKey{}, e)
	return e
}

// Context carries the extension to the message handlers.
func (e *timerExtension) Context() context.Context { return e.ctx }

func (e *timerExtension) extend(d time.Duration) {
	if !e.until.IsZero() {
		return // Envoy would ignore it
	}
	e.until = time.Now().Add(d)
	// A failed send means the stream is gone; the wait ends with the
	// stream's context.
	_ = e.ExternalProcessor_ProcessServer.Send(&extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(d)})
}

// left is how long a further wait may last within the override already
// sent, keeping answer room for the message's answer; ok is false when
// none was sent (the next wait sends its own).
func (e *timerExtension) left(answer time.Duration) (d time.Duration, ok bool) {
	if e.until.IsZero() {
		return 0, false
	}
	return time.Until(e.until) - answer, true
}

// Recv notes the class header of the request's headers.
func (e *timerExtension) Recv() (*extprocv3.ProcessingRequest, error) {
	m, err := e.ExternalProcessor_ProcessServer.Recv()
	name := e.cfg.Admission.ClassHeader
	if h := m.GetRequestHeaders(); h != nil && name != "" {
		name = strings.ToLower(name)
		for _, kv := range h.GetHeaders().GetHeaders() {
			if kv.GetKey() == name {
				e.classHeader = headerValue(kv)
			}
		}
	}
	if h, name := m.GetRequestHeaders(), strings.ToLower(e.cfg.Admission.SessionHeader); h != nil && name != "" {
		for _, kv := range h.GetHeaders().GetHeaders() {
			if kv.GetKey() == name {
				e.session = headerValue(kv)
			}
		}
	}
	return m, err
}

// reserveQueued is admission's reservation step after a tenant or
// tenant×model TPM refusal: with admission.max_wait > 0 and a Retry-After
// that fits the request's wait, the request waits in the admission queue
// until the window frees and the reservation is asked again. It returns
// the granted reservation, or the last refusal (its Retry-After counted
// from now) when the wait ends, the client leaves or the refusal cannot
// wait. A budget refusal never waits: a month does not free in seconds.
//
// The wait is ordered per reservation scope (the tenant, or tenant and
// model), not per backend set as the keys' wait: a tenant over its own
// TPM must not hold the tenants behind it on the same backends back.
// Within that scope the queue's class, weight and arrival rules hold.
func (s *Server) reserveQueued(ctx context.Context, r *routerStream, req ReserveRequest, res Reservation) (Reservation, error) {
	cfg := r.cfg
	if s.opts.Queue == nil || cfg.Admission.MaxWait.Duration <= 0 || res.Granted || res.Budget {
		return res, nil
	}
	ext, _ := ctx.Value(timerExtensionKey{}).(*timerExtension)
	classHeader := ""
	if ext != nil {
		classHeader = ext.classHeader
	}
	qr := queueRequest(cfg, r, classHeader)
	qr.Scope = "tpm:" + res.Scope + ":" + req.Tenant
	if res.Scope == "model" {
		qr.Scope += ":" + req.Model
	}
	qr.Tokens = r.estTokens + r.maxOut
	answer := cfg.Request.MessageTimeout.Duration
	deadline := time.Now().Add(qr.MaxWait)
	if ext != nil {
		if left, sent := ext.left(answer); sent {
			// Only the first override of a message counts (queue.go):
			// the keys' wait sent it, this wait ends within it.
			deadline = time.Now().Add(min(qr.MaxWait, left))
		}
		qr.OnWait = func() { ext.extend(time.Until(deadline) + answer) }
	}
	for {
		retryAt := time.Now().Add(res.RetryAfter)
		freed := s.holdsFreed.Load()
		qr.MaxWait = time.Until(deadline)
		if res.RetryAfter > qr.MaxWait {
			return res, nil
		}
		// Ready when the window frees, or earlier once a hold on this
		// replica settled or was released (most settle below their hold).
		// Not paced again: the keys' step already counted this request.
		q := s.opts.Queue.Admit(ctx, qr, func() (bool, time.Duration, Rate) {
			wait := time.Until(retryAt)
			return wait <= 0 || s.holdsFreed.Load() != freed, max(wait, 0), Rate{}
		})
		if !q.Admitted {
			res.RetryAfter = max(time.Until(retryAt), q.RetryAfter)
			res.Reset = res.RetryAfter
			return res, nil
		}
		next, err := s.opts.Reserver.Reserve(ctx, req)
		if err != nil || next.Granted || next.Budget {
			return next, err
		}
		// Someone took the window first (another replica, a request that
		// did not wait): wait again for the new Retry-After.
		res = next
	}
}
