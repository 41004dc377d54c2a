package mockupstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server is the fake provider. It is an http.Handler; Start also listens.
// All methods are safe for concurrent use.
type Server struct {
	opts    Options
	keys    map[string]string // credential value -> key id
	anyKey  bool
	headers []string // recorded request headers, canonical

	mu        sync.Mutex
	behaviors map[string]Behavior
	def       Behavior
	windows   map[string]*window
	sliding   map[string]*slidingLog // Behavior.Sliding, by key id
	rng       *rand.Rand
	records   []*Record
	dropped   map[string]Counters // counters of records dropped by MaxRecords
	seq       uint64
	instance  uint32            // in response ids: unique across mocks
	created   map[string]string // Responses id -> key id that created it

	httpSrv *http.Server
	addr    net.Addr
	stopped chan struct{}
}

// New builds a server; it does not listen until Start.
func New(opts Options) *Server {
	opts = opts.withDefaults()
	s := &Server{
		opts:      opts,
		keys:      make(map[string]string, len(opts.Keys)),
		anyKey:    len(opts.Keys) == 0,
		behaviors: map[string]Behavior{},
		def:       opts.Default,
		windows:   map[string]*window{},
		dropped:   map[string]Counters{},
		rng:       rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		instance:  rand.Uint32(),
		created:   map[string]string{},
	}
	for _, k := range opts.Keys {
		s.keys[k.Value] = k.ID
	}
	for _, h := range append([]string{"X-Request-Id", "X-Session-Id", "User-Agent", "Content-Type"}, opts.RecordHeaders...) {
		s.headers = append(s.headers, http.CanonicalHeaderKey(h))
	}
	return s
}

// SetBehavior changes how requests with key id are answered, from the next
// request on.
func (s *Server) SetBehavior(keyID string, b Behavior) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.behaviors[keyID] = b
}

// SetDefaultBehavior changes the behaviour of every key without its own.
func (s *Server) SetDefaultBehavior(b Behavior) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.def = b
}

// ClearBehaviors makes every key use the default behaviour again and
// forgets the RPM/TPM windows.
func (s *Server) ClearBehaviors() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.behaviors)
	clear(s.windows)
	clear(s.sliding)
}

func (s *Server) behavior(keyID string) Behavior {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.behaviors[keyID]; ok {
		return b
	}
	return s.def
}

// Requests returns a copy of every record kept (Options.MaxRecords), oldest
// first. Requests still in progress are included with their state so far.
func (s *Server) Requests() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, len(s.records))
	for i, r := range s.records {
		out[i] = cloneRecord(r)
	}
	return out
}

// Counts returns counters per key id ("" holds requests without a known
// key).
func (s *Server) Counts() map[string]Counters {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Counters{}
	for k, c := range s.dropped {
		out[k] = c
	}
	for _, r := range s.records {
		c := out[r.KeyID]
		c.add(r)
		out[r.KeyID] = c
	}
	return out
}

// Count returns the counters of one key id.
func (s *Server) Count(keyID string) Counters { return s.Counts()[keyID] }

// Total returns the counters over all requests.
func (s *Server) Total() Counters {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c Counters
	for _, d := range s.dropped {
		c.merge(d)
	}
	for _, r := range s.records {
		c.add(r)
	}
	return c
}

// ResetRecords forgets all records and counters.
func (s *Server) ResetRecords() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = nil
	clear(s.dropped)
}

func (s *Server) begin(r *Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.records) >= s.opts.MaxRecords {
		old := s.records[0]
		c := s.dropped[old.KeyID]
		c.add(old)
		s.dropped[old.KeyID] = c
		s.records[0] = nil
		s.records = s.records[1:]
	}
	s.records = append(s.records, r)
}

// update changes a record under the lock (records are shared with readers).
func (s *Server) update(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn()
}

func (s *Server) nextID() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return s.seq
}

// Start listens on addr (e.g. "127.0.0.1:0") and serves until ctx ends or
// Close is called. It returns the bound address.
func (s *Server) Start(ctx context.Context, addr string) (net.Addr, error) {
	s.mu.Lock()
	if s.httpSrv != nil {
		s.mu.Unlock()
		return nil, errors.New("mockupstream: already started")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("mockupstream: listen: %w", err)
	}
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelDebug),
	}
	if s.opts.H2C {
		p := new(http.Protocols)
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		hs.Protocols = p
	}
	s.httpSrv, s.addr, s.stopped = hs, ln.Addr(), make(chan struct{})
	s.mu.Unlock()

	go func() {
		defer close(s.stopped)
		if s.opts.TLS != nil {
			hs.TLSConfig = s.opts.TLS.Clone()
			_ = hs.ServeTLS(ln, "", "")
			return
		}
		_ = hs.Serve(ln)
	}()
	go func() {
		select {
		case <-ctx.Done():
			_ = hs.Close()
		case <-s.stopped:
		}
	}()
	s.opts.Logger.Info("mock upstream listening", "addr", ln.Addr().String(), "auth", string(s.opts.Auth), "keys", len(s.opts.Keys))
	return ln.Addr(), nil
}

// Addr is the bound address after Start, else nil.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// URL is the base URL after Start, e.g. "http://127.0.0.1:40123" (add
// "/v1" or a relay prefix yourself).
func (s *Server) URL() string {
	a := s.Addr()
	if a == nil {
		return ""
	}
	if s.opts.TLS != nil {
		return "https://" + a.String()
	}
	return "http://" + a.String()
}

// Close stops listening and drops every connection at once.
func (s *Server) Close() error {
	s.mu.Lock()
	hs, stopped := s.httpSrv, s.stopped
	s.mu.Unlock()
	if hs == nil {
		return nil
	}
	err := hs.Close()
	<-stopped
	return err
}

// Shutdown stops listening and waits for requests in progress until ctx
// ends, then drops what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	hs, stopped := s.httpSrv, s.stopped
	s.mu.Unlock()
	if hs == nil {
		return nil
	}
	err := hs.Shutdown(ctx)
	if err != nil {
		_ = hs.Close()
	}
	<-stopped
	return err
}

// Run serves opts on addr until ctx ends, then shuts down gracefully (at
// most 5s). It is the body of `swarmgate mock-upstream`.
func Run(ctx context.Context, addr string, opts Options) error {
	s := New(opts)
	if _, err := s.Start(context.WithoutCancel(ctx), addr); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("mockupstream: shutdown: %w", err)
	}
	return nil
}

// KeyHash is the short, non-reversible form of a credential used in
// records: "sha256:" and the first 16 hex digits.
func KeyHash(credential string) string {
	sum := sha256.Sum256([]byte(credential))
	return "sha256:" + hex.EncodeToString(sum[:8])
}
