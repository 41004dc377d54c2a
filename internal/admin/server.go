// Package admin is swarmgate's admin HTTP server: liveness and readiness,
// the redacted config, key pool and breaker state, usage and budgets, the
// admission queue, Prometheus metrics, and an embedded status page that
// polls those JSON endpoints. Apart from the key API (/v1/keys: sub-keys,
// behind the admin token or a minter key) it only reads state (access.go
// makes it GET/HEAD-only, checks Host and Origin, and asks for the bearer
// token when one is configured); components are reached through the small
// interfaces in sources.go, which the integrator adapts.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Options are the admin server's dependencies. Every field but Config may
// be nil: the endpoint then answers 503 saying what is not wired.
type Options struct {
	Logger   *slog.Logger
	Gatherer prometheus.Gatherer
	// Config returns the config in force (the last good one after reloads).
	Config func() *config.Config
	// Access is admin.* of the startup config: the bearer token and the
	// allowed Host names. Its zero value needs no token.
	Access   config.Admin
	Keys     KeySource
	Usage    http.Handler // accounting's /usage handler
	Budgets  BudgetSource
	Refusals *RefusalLog
	Queue    QueueSource // the admission queue; nil: "no queue in this process"
	// SubKeys is the sub-key store behind the key API (/v1/keys); nil:
	// sub-keys are not enabled and the key API answers 501.
	SubKeys SubKeyStore
	// BudgetLeft, when set, bounds a new sub-key's budget by what remains
	// of the budgets above it (nil: by their amounts only).
	BudgetLeft BudgetLeft
	// Ready are the readiness checks besides "config loaded".
	Ready []ReadyCheck
	// CheckTimeout bounds each readiness check and each source call
	// (default 2s).
	CheckTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown in Run (default 10s).
	ShutdownTimeout time.Duration
	Version         string
}

// Server is the admin HTTP server.
type Server struct {
	opts    Options
	log     *slog.Logger
	started time.Time
}

// New returns an admin server; it serves nothing until Run or Handler.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CheckTimeout <= 0 {
		opts.CheckTimeout = 2 * time.Second
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 10 * time.Second
	}
	if opts.Config == nil {
		opts.Config = func() *config.Config { return nil }
	}
	return &Server{opts: opts, log: opts.Logger, started: time.Now()}
}

// Handler returns the admin routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /config_dump", s.configDump)
	mux.HandleFunc("GET /keys", s.keys)
	mux.HandleFunc("GET /budgets", s.budgets)
	mux.HandleFunc("GET /refusals", s.refusals)
	mux.HandleFunc("GET /admission", s.admission)
	mux.Handle("GET /usage", s.usage())
	mux.Handle("GET /usage/", s.usage())
	mux.Handle("GET /metrics", s.metrics())
	s.statusRoutes(mux)
	listen := ""
	if cfg := s.opts.Config(); cfg != nil {
		listen = cfg.Listen.Admin
	}
	ac := newAccess(s.opts.Access, listen)
	s.keyRoutes(mux, ac)
	return securityHeaders(s.guard(ac, mux))
}

// Run serves on lis until ctx is done, then shuts down gracefully:
// in-flight requests get ShutdownTimeout to finish. It returns nil after a
// clean shutdown.
func (s *Server) Run(ctx context.Context, lis net.Listener) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	s.log.Info("admin server listening", "addr", lis.Addr().String(), "token", !s.opts.Access.Token.IsZero())
	if !s.opts.Access.Token.IsZero() && s.opts.Access.Token.Value() == "" {
		s.log.Error("admin: admin.token is set but not resolved; every protected endpoint answers 503", "ref", s.opts.Access.Token)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("admin server on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("admin server on %s: %w", lis.Addr(), serr)
	}
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("admin server shutdown: %w", err)
	}
	return nil
}

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		// The status page loads only its own script and style.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// writeJSON writes v with status.
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		s.log.Debug("admin: writing response", "err", err)
	}
}

type errorBody struct {
	Error string `json:"error"`
}

func (s *Server) notWired(w http.ResponseWriter, what string) {
	s.writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: what + " is not available in this process"})
}

func (s *Server) sourceFailed(w http.ResponseWriter, what string, err error) {
	s.log.Warn("admin: reading state failed", "source", what, "err", err)
	s.writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: what + ": " + err.Error()})
}

func (s *Server) metrics() http.Handler {
	if s.opts.Gatherer == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { s.notWired(w, "metrics") })
	}
	return promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
		Timeout:           10 * time.Second,
	})
}

func (s *Server) usage() http.Handler {
	if s.opts.Usage == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { s.notWired(w, "usage") })
	}
	return s.opts.Usage
}

// keysResponse groups keys by backend, in config order.
type keysResponse struct {
	Pools []pool `json:"pools"`
}

type pool struct {
	Backend string     `json:"backend"`
	Total   int        `json:"total"`
	Open    int        `json:"open"`
	Keys    []KeyState `json:"keys"`
}

func (s *Server) keys(w http.ResponseWriter, r *http.Request) {
	if s.opts.Keys == nil {
		s.notWired(w, "key pools")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.CheckTimeout)
	defer cancel()
	states, err := s.opts.Keys.KeyStates(ctx)
	if err != nil {
		s.sourceFailed(w, "key pools", err)
		return
	}
	s.writeJSON(w, http.StatusOK, groupPools(s.opts.Config(), states))
}

func groupPools(cfg *config.Config, states []KeyState) keysResponse {
	var order []string
	if cfg != nil {
		for _, b := range cfg.Backends {
			order = append(order, b.Name)
		}
	}
	byName := map[string]*pool{}
	for _, name := range order {
		byName[name] = &pool{Backend: name, Keys: []KeyState{}}
	}
	for _, k := range states {
		p, ok := byName[k.Backend]
		if !ok {
			p = &pool{Backend: k.Backend, Keys: []KeyState{}}
			byName[k.Backend] = p
			order = append(order, k.Backend)
		}
		p.Keys = append(p.Keys, k)
		p.Total++
		if k.State == BreakerOpen {
			p.Open++
		}
	}
	out := keysResponse{Pools: make([]pool, 0, len(order))}
	for _, name := range order {
		out.Pools = append(out.Pools, *byName[name])
	}
	return out
}

type budgetsResponse struct {
	Budgets []budgetView `json:"budgets"`
}

type budgetView struct {
	BudgetState
	// Percent is Spent/Limit*100; 0 when there is no limit.
	Percent   float64 `json:"percent"`
	Exhausted bool    `json:"exhausted"`
}

func (s *Server) budgets(w http.ResponseWriter, r *http.Request) {
	if s.opts.Budgets == nil {
		s.notWired(w, "budgets")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.CheckTimeout)
	defer cancel()
	states, err := s.opts.Budgets.Budgets(ctx)
	if err != nil {
		s.sourceFailed(w, "budgets", err)
		return
	}
	out := budgetsResponse{Budgets: make([]budgetView, 0, len(states))}
	for _, b := range states {
		v := budgetView{BudgetState: b}
		if b.Limit > 0 {
			v.Percent = b.Spent / b.Limit * 100
			v.Exhausted = b.Spent >= b.Limit
		}
		out.Budgets = append(out.Budgets, v)
	}
	s.writeJSON(w, http.StatusOK, out)
}

type refusalsResponse struct {
	Total    uint64    `json:"total"`
	Refusals []Refusal `json:"refusals"`
}

func (s *Server) refusals(w http.ResponseWriter, r *http.Request) {
	if s.opts.Refusals == nil {
		s.notWired(w, "refusal log")
		return
	}
	n := 50
	if v := r.URL.Query().Get("limit"); v != "" {
		if l, err := strconv.Atoi(v); err == nil && l > 0 {
			n = l
		}
	}
	rs := s.opts.Refusals.Recent(n)
	if rs == nil {
		rs = []Refusal{}
	}
	s.writeJSON(w, http.StatusOK, refusalsResponse{Total: s.opts.Refusals.Total(), Refusals: rs})
}
