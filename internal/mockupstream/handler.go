package mockupstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/schema/openai"
)

// Endpoints are matched on the path suffix, so relays that mount the API
// under a prefix (/openai/v1/chat/completions) work as well as /v1/....
func endpointOf(path string) string {
	path = strings.TrimRight(path, "/")
	switch {
	case strings.HasSuffix(path, "/messages/count_tokens"):
		return "count_tokens"
	case strings.HasSuffix(path, "/messages"):
		return "messages"
	case strings.HasSuffix(path, "/responses"):
		return "responses"
	case strings.HasSuffix(path, "/chat/completions"):
		return "chat"
	case strings.HasSuffix(path, "/completions"):
		return "completions"
	case strings.HasSuffix(path, "/embeddings"):
		return "embeddings"
	case strings.HasSuffix(path, "/models"):
		return "models"
	}
	return "unknown"
}

// credential reads the presented API key for the configured auth style.
func credential(h http.Header, style config.AuthStyle) string {
	switch style {
	case config.AuthXAPIKey:
		return strings.TrimSpace(h.Get("X-Api-Key"))
	case config.AuthAPIKey:
		return strings.TrimSpace(h.Get("Api-Key"))
	default:
		v := h.Get("Authorization")
		if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			return strings.TrimSpace(v[7:])
		}
		return ""
	}
}

// credentialHeaders are never recorded.
var credentialHeaders = []string{"Authorization", "X-Api-Key", "Api-Key", "Proxy-Authorization", "Cookie"}

func (s *Server) selectHeaders(h http.Header) http.Header {
	out := http.Header{}
	for name, vals := range h {
		if slices.Contains(credentialHeaders, name) {
			continue
		}
		if slices.Contains(s.headers, name) || strings.HasPrefix(strings.ToLower(name), "x-swarmgate-") {
			out[name] = slices.Clone(vals)
		}
	}
	return out
}

// apiRequest is the part of a request body the mock looks at, for every
// family (chat, completions, embeddings, Responses, Anthropic Messages).
type apiRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           int `json:"max_tokens"`
	MaxCompletionTokens int `json:"max_completion_tokens"`
	MaxOutputTokens     int `json:"max_output_tokens"` // Responses
	Messages            []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"` // Responses: function, namespace...
		Name     string `json:"name"` // Anthropic, Responses
		Function *struct {
			Name string `json:"name"`
		} `json:"function"` // chat completions
		Tools []struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"tools"` // a Responses namespace's
	} `json:"tools"`
	System             json.RawMessage `json:"system"`       // Anthropic: a string or text blocks
	Instructions       json.RawMessage `json:"instructions"` // Responses
	PreviousResponseID string          `json:"previous_response_id"`
	Prompt             json.RawMessage `json:"prompt"`
	Input              json.RawMessage `json:"input"`
	Dimensions         int             `json:"dimensions"`
	EncodingFormat     string          `json:"encoding_format"`

	convo conversation // what the messages hold (tools.go), not decoded
}

func (q *apiRequest) maxTokens() int {
	switch {
	case q.MaxCompletionTokens > 0:
		return q.MaxCompletionTokens
	case q.MaxOutputTokens > 0:
		return q.MaxOutputTokens
	}
	return q.MaxTokens
}

func (q *apiRequest) includeUsage() bool {
	return q.StreamOptions != nil && q.StreamOptions.IncludeUsage
}

// ServeHTTP answers one request. Resets abort the connection (hijack, or
// http.ErrAbortHandler on HTTP/2), so serve it from an http.Server, not a
// ResponseRecorder, when resets are configured.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec, cred := s.record(r)
	s.begin(rec)
	log := s.opts.Logger.With("path", r.URL.Path, "key_id", rec.KeyID)

	if rec.KeyID == "" {
		msg := "Incorrect API key provided."
		if cred == "" {
			msg = "You didn't provide an API key (auth style " + string(s.opts.Auth) + ")."
		}
		s.fail(w, rec, http.StatusUnauthorized, "unauthorized", "invalid_request_error", "invalid_api_key", msg)
		log.Debug("mock upstream: unauthorized")
		return
	}
	if rec.Endpoint == "unknown" {
		s.fail(w, rec, http.StatusNotFound, "bad_request", "invalid_request_error", "unknown_url", "Unknown request URL: "+r.Method+" "+r.URL.Path)
		return
	}
	if rec.Endpoint == "models" {
		if r.Method != http.MethodGet {
			s.fail(w, rec, http.StatusMethodNotAllowed, "bad_request", "invalid_request_error", "method_not_allowed", "use GET")
			return
		}
		s.serveModels(w, rec)
		return
	}
	if r.Method != http.MethodPost {
		s.fail(w, rec, http.StatusMethodNotAllowed, "bad_request", "invalid_request_error", "method_not_allowed", "use POST")
		return
	}
	q, ok := s.readRequest(w, r, rec)
	if !ok {
		return
	}
	u := s.usageFor(rec.Endpoint, q, r.Header)
	s.update(func() {
		rec.PromptTokens, rec.CompletionTokens = u.prompt, u.completion
		rec.CachedTokens, rec.CacheWriteTokens, rec.ReasoningTokens = u.cached, u.cacheWrite, u.reasoning
	})
	b, act, ok := s.behave(w, r, rec, u, log)
	if !ok {
		return
	}
	s.act(w, r, rec, q, u, b, act)
	log.Debug("mock upstream: answered", "action", act.String(), "model", q.Model, "stream", q.Stream)
}

// record starts the request's record: what was asked and with which key
// (the key's id, or "" when the credential is unknown); it returns the
// credential presented.
func (s *Server) record(r *http.Request) (*Record, string) {
	rec := &Record{
		Time: s.opts.Now(), Method: r.Method, Path: r.URL.Path, Endpoint: endpointOf(r.URL.Path), Host: r.Host,
		Proto: r.Proto, Headers: s.selectHeaders(r.Header),
	}
	if r.TLS != nil {
		rec.SNI = r.TLS.ServerName
	}
	cred := credential(r.Header, s.opts.Auth)
	if cred != "" {
		rec.KeyHash = KeyHash(cred)
		if id, ok := s.keys[cred]; ok {
			rec.KeyID = id
		} else if s.anyKey {
			rec.KeyID = "any"
		}
	}
	return rec, cred
}

// readRequest reads and checks the body of a POST; false when it answered
// (with the provider's error) or the client went away.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request, rec *Record) (*apiRequest, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	s.update(func() {
		rec.BodyBytes = len(body)
		if s.opts.RecordBodies {
			rec.Body = bytes.Clone(body)
		}
	})
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.fail(w, rec, http.StatusRequestEntityTooLarge, "bad_request", "invalid_request_error", "request_too_large", "request body too large")
			return nil, false
		}
		s.update(func() { rec.Outcome = "canceled" })
		return nil, false
	}
	q := &apiRequest{}
	if err := json.Unmarshal(body, q); err != nil {
		s.fail(w, rec, http.StatusBadRequest, "bad_request", "invalid_request_error", "invalid_json", "We could not parse the JSON body of your request.")
		return nil, false
	}
	q.convo = inspectConversation(rec.Endpoint, q)
	s.update(func() {
		rec.Model, rec.Stream, rec.IncludeUsage, rec.MaxTokens = q.Model, q.Stream, q.includeUsage(), q.maxTokens()
		rec.ToolResults, rec.SawImage = q.convo.toolResults, q.convo.sawImage
	})
	if q.Model == "" {
		s.fail(w, rec, http.StatusBadRequest, "bad_request", "invalid_request_error", "missing_model", "you must provide a model parameter")
		return nil, false
	}
	if code, msg := s.checkFamily(rec, r.Header, q); msg != "" {
		status := http.StatusBadRequest
		if code == "previous_response_not_found" {
			status = http.StatusNotFound
		}
		s.fail(w, rec, status, "bad_request", "invalid_request_error", code, msg)
		return nil, false
	}
	if s.opts.StrictModels && !slices.Contains(s.opts.Models, q.Model) {
		s.fail(w, rec, http.StatusNotFound, "bad_request", "invalid_request_error", "model_not_found", "The model `"+q.Model+"` does not exist or you do not have access to it.")
		return nil, false
	}
	if rec.Endpoint == "embeddings" && q.Stream {
		s.fail(w, rec, http.StatusBadRequest, "bad_request", "invalid_request_error", "invalid_value", "embeddings cannot be streamed")
		return nil, false
	}
	return q, true
}

// behave applies the key's behaviour before the answer: its headers, its
// latency and its rate limits. It returns the action to take; false when
// it answered (rate limited) or the client went away.
func (s *Server) behave(w http.ResponseWriter, r *http.Request, rec *Record, u usage, log *slog.Logger) (Behavior, Action, bool) {
	b := s.behavior(rec.KeyID)
	for k, v := range b.Headers {
		w.Header().Set(k, v)
	}
	w.Header().Set("X-Mock-Key-Id", rec.KeyID)
	if id := r.Header.Get("X-Request-Id"); id != "" {
		w.Header().Set("X-Request-Id", id)
	}
	if !sleep(r.Context(), b.Latency) {
		s.update(func() { rec.Outcome = "canceled" })
		return b, ActOK, false
	}
	act, limited := s.admit(rec.KeyID, b, u.prompt+u.completion, w.Header(), anthropicEndpoint(rec.Endpoint))
	if limited != "" {
		if w.Header().Get("Retry-After") == "" {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(s.retryIn(rec.KeyID))))
		}
		s.fail(w, rec, http.StatusTooManyRequests, limited, "requests", "rate_limit_exceeded", "Rate limit reached for this key ("+limited+"). Please try again later.")
		log.Debug("mock upstream: rate limited", "reason", limited)
		return b, ActOK, false
	}
	return b, act, true
}

// act answers as the key's behaviour says: a scripted failure, a reset,
// or the answer (cut mid-stream for ActResetMidStream).
func (s *Server) act(w http.ResponseWriter, r *http.Request, rec *Record, q *apiRequest, u usage, b Behavior, act Action) {
	switch act {
	case ActRateLimit:
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(b.RetryAfter)))
		if anthropicEndpoint(rec.Endpoint) {
			w.Header().Set("Anthropic-Ratelimit-Requests-Remaining", "0")
			w.Header().Set("Anthropic-Ratelimit-Requests-Reset", s.opts.Now().Add(b.RetryAfter).UTC().Format(time.RFC3339))
		} else {
			w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
		}
		s.fail(w, rec, http.StatusTooManyRequests, "rate_limit", "requests", "rate_limit_exceeded", "Rate limit reached. Please try again later.")
	case ActError:
		s.fail(w, rec, b.status(), "error", "server_error", "", "The server had an error while processing your request.")
	case ActReset:
		s.update(func() { rec.Outcome = "reset" })
		abort(w)
	default:
		resetAfter := -1
		if act == ActResetMidStream {
			resetAfter = b.ResetAfterChunks
		}
		s.answer(w, r, rec, q, u, resetAfter)
	}
}

// admit applies the key's RPM/TPM window and random failures. It returns
// the action to take, or the name of the limit that was hit.
//
// Anthropic endpoints carry Anthropic's anthropic-ratelimit-* headers
// (resets as RFC 3339 instants) instead of OpenAI's x-ratelimit-*.
func (s *Server) admit(keyID string, b Behavior, tokens int, h http.Header, anthropic bool) (Action, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	act := b.Action
	if act == ActOK && b.FailProbability > 0 && s.rng.Float64() < b.FailProbability {
		act = b.failAction()
	}
	if b.Sliding != nil && !anthropic {
		return act, s.admitSliding(keyID, b.Sliding, h)
	}
	if b.RPM <= 0 && b.TPM <= 0 {
		return act, ""
	}
	now := s.opts.Now()
	win := s.windows[keyID]
	if win == nil {
		win = &window{}
		s.windows[keyID] = win
	}
	length, rpm, tpm := b.window()
	win.roll(now, length)
	limited := ""
	switch {
	case rpm > 0 && win.requests >= rpm:
		limited = "rpm_limit"
	case tpm > 0 && win.tokens+tokens > tpm:
		limited = "tpm_limit"
	default:
		win.requests++
		win.tokens += tokens
	}
	if anthropic {
		setAnthropicLimits(h, b, win, now)
		return act, limited
	}
	reset := formatReset(win.resetIn(now))
	if b.RPM > 0 {
		h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(b.RPM))
		h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(max(0, rpm-win.requests)))
		h.Set("X-Ratelimit-Reset-Requests", reset)
	}
	if b.TPM > 0 {
		h.Set("X-Ratelimit-Limit-Tokens", strconv.Itoa(b.TPM))
		h.Set("X-Ratelimit-Remaining-Tokens", strconv.Itoa(max(0, tpm-win.tokens)))
		h.Set("X-Ratelimit-Reset-Tokens", reset)
	}
	return act, limited
}

func (s *Server) retryIn(keyID string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.windows[keyID]; w != nil {
		return w.resetIn(s.opts.Now())
	}
	return time.Second
}

// formatReset writes a duration the way OpenAI's x-ratelimit-reset-* do
// ("1s", "6m0s", "20ms").
func formatReset(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	}
	return d.Round(time.Second).String()
}

// fail records the outcome and then writes the error in the endpoint's
// family (OpenAI's shape, or Anthropic's on /v1/messages*), so the record
// is final by the time the client has the answer.
func (s *Server) fail(w http.ResponseWriter, rec *Record, status int, outcome, typ, code, msg string) {
	s.update(func() { rec.Status, rec.Outcome = status, outcome })
	if anthropicEndpoint(rec.Endpoint) {
		writeAnthropicError(w, status, msg)
		return
	}
	var e openai.ErrorBody
	e.Error.Message, e.Error.Type = msg, typ
	if code != "" {
		e.Error.Code = &code
	}
	body, _ := json.Marshal(e)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// abort resets the connection: hijack and close with SO_LINGER 0 (a TCP
// RST) on HTTP/1, an aborted stream on HTTP/2.
func abort(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			if tc, ok := underlyingTCP(conn); ok {
				_ = tc.SetLinger(0)
			}
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func underlyingTCP(c net.Conn) (*net.TCPConn, bool) {
	for {
		switch v := c.(type) {
		case *net.TCPConn:
			return v, true
		case interface{ NetConn() net.Conn }: // *tls.Conn
			c = v.NetConn()
		default:
			return nil, false
		}
	}
}

// sleep waits d unless ctx ends first; it reports whether it waited fully.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
