package extproc

import (
	"context"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/swarmgate/swarmgate/extproc/admit"
	"github.com/swarmgate/swarmgate/extproc/envoymsg"
	"github.com/swarmgate/swarmgate/internal/config"
)

// timerExtension is the admission queue's admit.Timer on a router-level
// stream: it sends a ProcessingResponse carrying only
// override_message_timeout, at most once per message (Envoy ignores the
// rest). It is sent from the goroutine serving the stream, before that
// message's answer, so answers stay in order. It also keeps the value of
// admission.class_header from the request headers as they pass (read by
// the admission steps on the same goroutine).
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

// timerOf is the stream's timer extension (nil when queueing is off).
func timerOf(ctx context.Context) admit.Timer {
	if e, _ := ctx.Value(timerExtensionKey{}).(*timerExtension); e != nil {
		return e
	}
	return nil
}

// Context carries the extension to the message handlers.
func (e *timerExtension) Context() context.Context { return e.ctx }

// ClassHeader is the request's admission.class_header value.
func (e *timerExtension) ClassHeader() string { return e.classHeader }

// SessionHeader is the request's admission.session_header value.
func (e *timerExtension) SessionHeader() string { return e.session }

// Extend sends the override for d from now, unless one was sent.
func (e *timerExtension) Extend(d time.Duration) {
	if !e.until.IsZero() {
		return // Envoy would ignore it
	}
	e.until = time.Now().Add(d)
	// A failed send means the stream is gone; the wait ends with the
	// stream's context.
	_ = e.ExternalProcessor_ProcessServer.Send(envoymsg.TimeoutOverride(d))
}

// Left is how long a further wait may last within the override already
// sent, keeping answer room for the message's answer; ok is false when
// none was sent (the next wait sends its own).
func (e *timerExtension) Left(answer time.Duration) (d time.Duration, ok bool) {
	if e.until.IsZero() {
		return 0, false
	}
	return time.Until(e.until) - answer, true
}

// Recv notes the class and session headers of the request's headers.
func (e *timerExtension) Recv() (*extprocv3.ProcessingRequest, error) {
	m, err := e.ExternalProcessor_ProcessServer.Recv()
	name := e.cfg.Admission.ClassHeader
	if h := m.GetRequestHeaders(); h != nil && name != "" {
		name = strings.ToLower(name)
		for _, kv := range h.GetHeaders().GetHeaders() {
			if kv.GetKey() == name {
				e.classHeader = envoymsg.HeaderValue(kv)
			}
		}
	}
	if h, name := m.GetRequestHeaders(), strings.ToLower(e.cfg.Admission.SessionHeader); h != nil && name != "" {
		for _, kv := range h.GetHeaders().GetHeaders() {
			if kv.GetKey() == name {
				e.session = label(envoymsg.HeaderValue(kv)) // printable, bounded
			}
		}
	}
	return m, err
}
