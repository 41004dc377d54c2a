package envoysim

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Sim is a running simulated Envoy listener.
type Sim struct {
	cfg       Config
	clusters  map[string]*Cluster
	transport *http.Transport
	srv       *http.Server
	lis       net.Listener

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	rng     *rand.Rand
	records []Record

	stats stats
}

type stats struct {
	streams, rejectedMutations, ignoredImmediate, ignoredClearRouteCache atomic.Int64
	messageTimeouts, failOpen, droppedMetadata, retries                  atomic.Int64
}

// Stats are counters named after the Envoy stats they model.
type Stats struct {
	Streams                   int64 // ext_proc streams opened
	RejectedHeaderMutations   int64 // ext_proc rejected_header_mutations
	IgnoredImmediateResponses int64 // upstream filter: immediate_response ignored
	IgnoredClearRouteCache    int64 // upstream filter: clear_route_cache ignored
	MessageTimeouts           int64 // ext_proc message_timeouts
	FailureModeAllowed        int64 // ext_proc failure_mode_allowed
	DroppedMetadata           int64 // dynamic metadata outside receiving namespaces
	Retries                   int64 // router upstream_rq_retry
}

// Record describes one downstream request the sim handled.
type Record struct {
	RequestID string
	Route     string
	Cluster   string
	Status    int
	// LocalReply is set when Envoy (or an ImmediateResponse) answered.
	LocalReply bool
	Attempts   []Attempt
	// DynamicMetadata the router-level filter kept: namespace → key → value.
	DynamicMetadata map[string]map[string]any
	// Aborted is set when the response was cut (client gone or upstream
	// reset) before its end.
	Aborted bool
}

// Attempt is one upstream try.
type Attempt struct {
	Endpoint string
	Priority int
	Status   int // 0 when the attempt failed without a response
	Err      string
	// Header is what the endpoint received (after the upstream filter).
	Header http.Header
	Path   string
}

// New builds a sim; Start serves it.
func New(cfg Config) (*Sim, error) {
	if cfg.BufferLimit == 0 {
		cfg.BufferLimit = 1 << 20
	}
	if cfg.EnvoyHeaderPrefix == "" {
		cfg.EnvoyHeaderPrefix = "x-envoy"
	}
	s := &Sim{
		cfg:      cfg,
		clusters: map[string]*Cluster{},
		conns:    map[string]*grpc.ClientConn{},
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		transport: &http.Transport{
			// Envoy forwards bodies as they are: no transparent gzip.
			DisableCompression:  true,
			MaxIdleConnsPerHost: 64,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		},
	}
	for i := range cfg.Clusters {
		c := &cfg.Clusters[i]
		if _, dup := s.clusters[c.Name]; dup {
			return nil, fmt.Errorf("envoysim: duplicate cluster %q", c.Name)
		}
		s.clusters[c.Name] = c
	}
	for _, r := range cfg.Routes {
		if r.Cluster != "" && s.clusters[r.Cluster] == nil {
			return nil, fmt.Errorf("envoysim: route %q names unknown cluster %q", r.Name, r.Cluster)
		}
	}
	return s, nil
}

// Start listens on addr (e.g. "127.0.0.1:0") until ctx ends or Close.
func (s *Sim) Start(ctx context.Context, addr string) error {
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("envoysim: listen: %w", err)
	}
	s.lis = lis
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(lis) }()
	go func() {
		<-ctx.Done()
		_ = s.Close()
	}()
	return nil
}

// URL is the listener's base URL, e.g. "http://127.0.0.1:40123".
func (s *Sim) URL() string { return "http://" + s.lis.Addr().String() }

// Close stops the listener and the ext_proc connections.
func (s *Sim) Close() error {
	var err error
	if s.srv != nil {
		err = s.srv.Close()
	}
	s.mu.Lock()
	for k, c := range s.conns {
		_ = c.Close()
		delete(s.conns, k)
	}
	s.mu.Unlock()
	s.transport.CloseIdleConnections()
	return err
}

// Stats returns the counters.
func (s *Sim) Stats() Stats {
	return Stats{
		Streams:                   s.stats.streams.Load(),
		RejectedHeaderMutations:   s.stats.rejectedMutations.Load(),
		IgnoredImmediateResponses: s.stats.ignoredImmediate.Load(),
		IgnoredClearRouteCache:    s.stats.ignoredClearRouteCache.Load(),
		MessageTimeouts:           s.stats.messageTimeouts.Load(),
		FailureModeAllowed:        s.stats.failOpen.Load(),
		DroppedMetadata:           s.stats.droppedMetadata.Load(),
		Retries:                   s.stats.retries.Load(),
	}
}

// Records returns what the sim did, oldest first.
func (s *Sim) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Record(nil), s.records...)
}

// RecordFor returns the record of a request id.
func (s *Sim) RecordFor(id string) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.records) - 1; i >= 0; i-- {
		if s.records[i].RequestID == id {
			return s.records[i], true
		}
	}
	return Record{}, false
}

// SetHealthy flips an endpoint's health, as an EDS update would.
func (s *Sim) SetHealthy(cluster, address string, healthy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clusters[cluster]; c != nil {
		for i := range c.Endpoints {
			if c.Endpoints[i].Address == address {
				c.Endpoints[i].Unhealthy = !healthy
			}
		}
	}
}

func (s *Sim) conn(target string) (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.conns[target]; c != nil {
		return c, nil
	}
	// Envoy's gRPC client does not cap ext_proc messages at grpc-go's 4 MiB
	// default; a buffered body travels in one message.
	c, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20), grpc.MaxCallSendMsgSize(256<<20)))
	if err != nil {
		return nil, fmt.Errorf("envoysim: dial ext_proc %s: %w", target, err)
	}
	s.conns[target] = c
	return c, nil
}

func (s *Sim) record(r Record) {
	s.mu.Lock()
	s.records = append(s.records, r)
	if len(s.records) > 4096 {
		s.records = s.records[1:]
	}
	s.mu.Unlock()
}

func newRequestID() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var errNoHealthy = errors.New("no healthy upstream")
