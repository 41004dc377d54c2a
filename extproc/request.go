package extproc

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/swarmgate/swarmgate/extproc/admit"
	"github.com/swarmgate/swarmgate/extproc/envoymsg"
	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/identity"
)

// requestHeaders reads the client's headers into the facts, strips what
// must not reach a provider, authenticates and checks the endpoint; the
// model list is answered here.
func (s *Server) requestHeaders(r *routerStream, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	r.start = time.Now()
	f := &r.f
	// The gateway's own identity keys the reservation, the ledger, the
	// settle and the key pool's per-request records (a client's reused
	// x-request-id must not make two requests one), and every answer
	// carries it, refusals included, so what a client quotes finds the
	// access log line, the trace and the ledger entry.
	f.RequestID = identity.NewRequestID()
	a := r.answer()
	resp, _ := a.Start(envoymsg.RequestHeaders)
	in := r.readHeaders(h, a)
	f.Path = pathOnly(f.RawPath)
	f.Shape = family.ShapeForPath(f.Path)
	if f.AnthropicVersion != "" && isModels(f.Path) {
		// The model list is shared by both APIs: Anthropic's SDKs (which
		// always send anthropic-version) get its refusals in their shape.
		f.Shape = family.Anthropic
	}
	f.Spec = family.ForPath(f.Path)
	if x := admit.Authenticate(r.cfg, s.opts.Authenticator, f, in.authorization, in.apiKey); x != nil {
		return s.refused(r, x)
	}
	local, x := admit.Endpoint(r.cfg, f, in.method, in.contentLength, h.GetEndOfStream())
	switch {
	case x != nil:
		return s.refused(r, x)
	case local:
		return s.models(r)
	}
	return resp
}

// clientHeaders are the request headers admission reads but does not keep.
type clientHeaders struct {
	method, authorization, apiKey, contentLength string
}

// readHeaders fills the facts from the request headers and removes the
// client's credentials and every internal header from the request.
func (r *routerStream) readHeaders(h *extprocv3.HttpHeaders, a *envoymsg.Answer) clientHeaders {
	var in clientHeaders
	f := &r.f
	stickyName := strings.ToLower(r.cfg.Request.StickyHeader)
	for _, kv := range h.GetHeaders().GetHeaders() {
		k := kv.GetKey()
		switch {
		case k == ":method":
			in.method = envoymsg.HeaderValue(kv)
		case k == ":path":
			f.RawPath = envoymsg.HeaderValue(kv)
		case k == "authorization":
			// The virtual key never reaches a provider.
			in.authorization = envoymsg.HeaderValue(kv)
			a.Remove(k)
		case k == "x-api-key":
			in.apiKey = envoymsg.HeaderValue(kv)
			a.Remove(k)
		case k == "content-length":
			in.contentLength = envoymsg.HeaderValue(kv)
		case k == contract.HeaderRequestID:
			f.ClientID = label(envoymsg.HeaderValue(kv))
		case k == "anthropic-version":
			f.AnthropicVersion = label(envoymsg.HeaderValue(kv))
		case k == "anthropic-beta":
			f.AnthropicBeta = label(envoymsg.HeaderValue(kv))
		case k == "traceparent":
			r.traceparent = envoymsg.HeaderValue(kv)
		case k == "tracestate":
			r.tracestate = envoymsg.HeaderValue(kv)
		case k == stickyName && stickyName != "":
			f.Sticky = label(envoymsg.HeaderValue(kv))
		case isInternal(k):
			// Strip every client-supplied internal header first: none of
			// them may be spoofed.
			a.Remove(k)
		case k == "accept-encoding":
			// The gateway reads every answer it bills, and decodes gzip
			// only: a brotli or zstd answer's usage went unread and its
			// output was billed as nothing.
			if v, keep := readableEncoding(envoymsg.HeaderValue(kv)); !keep {
				if v == "" {
					a.Remove(k)
				} else {
					a.Set(k, v)
				}
			}
		case k == "openai-organization" || k == "openai-project":
			// Which provider organisation or project a request bills to
			// and reads from is the backend's choice (its static
			// headers), never the client's: a key of several projects
			// would otherwise serve whichever the client names.
			a.Remove(k)
		}
	}
	return in
}

// readableEncoding is the accept-encoding to send upstream for the
// client's v: keep (true) when v asks only for encodings the gateway reads
// (gzip, identity); else "gzip" when the client accepts it, or "" (remove
// the header: identity).
func readableEncoding(v string) (string, bool) {
	switch strings.TrimSpace(v) {
	case "gzip", "identity", "":
		return "", true
	}
	gzip := false
	for part := range strings.SplitSeq(v, ",") {
		name, params, _ := strings.Cut(part, ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name != "gzip" && name != "x-gzip" && name != "*" {
			continue
		}
		q := strings.TrimSpace(params)
		if after, ok := strings.CutPrefix(q, "q="); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(after), 64); err == nil && f <= 0 {
				continue
			}
		}
		gzip = true
	}
	if gzip {
		return "gzip", false
	}
	return "", false
}

// isModels: the model list or one model of it.
func isModels(path string) bool {
	return path == "/v1/models" || strings.HasPrefix(path, "/v1/models/")
}

// models answers GET /v1/models (and /v1/models/{id}) with the aliases the
// caller may use, in OpenAI's list shape, or Anthropic's when the caller
// sends anthropic-version (its SDKs always do).
func (s *Server) models(r *routerStream) *extprocv3.ProcessingResponse {
	f := &r.f
	t := f.Owner.Tenant
	one := strings.TrimPrefix(f.Path, "/v1/models/")
	if f.Path == "/v1/models" {
		one = ""
	}
	items := make([]byte, 0, 256)
	n := 0
	first, last := "", ""
	for i := range r.cfg.Models {
		m := &r.cfg.Models[i]
		if !t.Allows(m.Name) || (one != "" && m.Name != one) {
			continue
		}
		if n > 0 {
			items = append(items, ',')
		}
		if n == 0 {
			first = m.Name
		}
		n++
		last = m.Name
		items = f.Shape.AppendModel(items, m.Name)
	}
	b := items
	if one == "" {
		b = f.Shape.AppendList(make([]byte, 0, len(items)+96), items, first, last)
	} else if n == 0 {
		return s.refuse(r, errModelNotFound(one))
	}
	r.finished = true
	return envoymsg.Immediate(http.StatusOK, []envoymsg.Header{{Key: requestIDHeader(f.Shape), Value: f.RequestID}}, b, "")
}
