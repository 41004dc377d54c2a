package envoysim

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
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

	mu         sync.Mutex
	conns      map[string]*grpc.ClientConn
	rng        *rand.Rand
	records    []Record
	recorded   chan struct{} // closed and replaced on every new record
	resources  map[string]*clusterResources
	localReply *localReplyConfig
	// idle counts the kept-alive upstream connections per endpoint, which
	// decide when auto_host_rewrite happens (Sim.try).
	idle map[string]int

	stats stats
}

type stats struct {
	streams, rejectedMutations, ignoredImmediate, ignoredClearRouteCache atomic.Int64
	messageTimeouts, failOpen, droppedMetadata, retries                  atomic.Int64
	spurious, clearRouteIgnored, retryOverflow, retryLimitExceeded       atomic.Int64
	retryRateLimited, retryAbandoned, lbPanic, noHealthy                 atomic.Int64
	immediateUpstream, rlOverLimit, rlError, rlFailOpen                  atomic.Int64
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
	// SpuriousMessages is ext_proc spurious_msgs_received.
	SpuriousMessages int64
	// ClearRouteCacheIgnored is ext_proc clear_route_cache_ignored: the
	// answer had no header mutation.
	ClearRouteCacheIgnored int64
	// RetryOverflow is upstream_rq_retry_overflow (retry budget or
	// max_retries circuit breaker), RetryLimitExceeded
	// upstream_rq_retry_limit_exceeded, RetryBackoffRateLimited
	// upstream_rq_retry_backoff_ratelimited, RetryOrShadowAbandoned
	// retry_or_shadow_abandoned (body above the buffer limit).
	RetryOverflow           int64
	RetryLimitExceeded      int64
	RetryBackoffRateLimited int64
	RetryOrShadowAbandoned  int64
	// LbHealthyPanic is lb_healthy_panic; NoHealthyUpstream
	// upstream_cx_none_healthy-style local replies.
	LbHealthyPanic    int64
	NoHealthyUpstream int64
	// UpstreamImmediateResponses: local replies sent by an upstream
	// ext_proc (ImmediateResponse, error or timeout), not retried.
	UpstreamImmediateResponses int64
	// RateLimitOverLimit, RateLimitError, RateLimitFailureModeAllowed are
	// the rate-limit filter's ratelimit.over_limit / error /
	// failure_mode_allowed.
	RateLimitOverLimit          int64
	RateLimitError              int64
	RateLimitFailureModeAllowed int64
}

// Record describes one downstream request the sim handled.
type Record struct {
	RequestID string
	// ClientRequestID is the x-request-id the request arrived with. Envoy
	// replaces it on edge requests; the sim keeps it only so that tests can
	// find their request (RecordFor matches either).
	ClientRequestID string
	Route           string
	Cluster         string
	Status          int
	// LocalReply is set when Envoy (or an ImmediateResponse) answered.
	LocalReply bool
	Attempts   []Attempt
	// DynamicMetadata the router-level filter kept: namespace → key → value.
	DynamicMetadata map[string]map[string]any
	// Aborted is set when the response was cut (client gone or upstream
	// reset) before its end.
	Aborted bool
	// RequestHeader is the request header map as it was when the stream was
	// destroyed: after the router-level filter and every attempt's upstream
	// filter changed it (one map per request, see Attempt).
	RequestHeader http.Header
	// RateLimitCalls are the rate-limit service calls of this request: the
	// request-time one and the stream-done one (apply_on_stream_done).
	RateLimitCalls []RateLimitCall
	// UpstreamLocalReply is set when an upstream filter answered the
	// request (ImmediateResponse or its error) on attempt len(Attempts).
	UpstreamLocalReply bool
}

// RateLimitCall is one ShouldRateLimit call the rate-limit filter made.
type RateLimitCall struct {
	// StreamDone is false for the decodeHeaders call, true for the one made
	// in onDestroy with the apply_on_stream_done descriptors.
	StreamDone bool
	Request    *rlspb.RateLimitRequest
	Response   *rlspb.RateLimitResponse
	Err        string
}

// Attempt is one upstream try. The router has one request header map per
// request: each attempt's upstream filter works on it, so what attempt N
// changed is what attempt N+1 starts from (upstream_request.cc
// UpstreamRequest::acceptHeadersFromRouter passes *parent_.downstreamHeaders(),
// v1.38.0). The body is a fresh copy of the router's retry buffer per
// attempt (router.cc Filter::continueDoRetry, Buffer::OwnedImpl copy,
// v1.38.0), so an upstream filter's body mutation does not carry over.
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
		cfg:       cfg,
		clusters:  map[string]*Cluster{},
		recorded:  make(chan struct{}),
		resources: map[string]*clusterResources{},
		idle:      map[string]int{},
		conns:     map[string]*grpc.ClientConn{},
		rng:       rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		transport: &http.Transport{
			// Envoy forwards bodies as they are: no transparent gzip.
			DisableCompression:  true,
			MaxIdleConnsPerHost: 64,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		},
	}
	lr, err := newLocalReplyConfig(cfg.LocalReply)
	if err != nil {
		return nil, err
	}
	s.localReply = lr
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
		Streams:                     s.stats.streams.Load(),
		RejectedHeaderMutations:     s.stats.rejectedMutations.Load(),
		IgnoredImmediateResponses:   s.stats.ignoredImmediate.Load(),
		IgnoredClearRouteCache:      s.stats.ignoredClearRouteCache.Load(),
		MessageTimeouts:             s.stats.messageTimeouts.Load(),
		FailureModeAllowed:          s.stats.failOpen.Load(),
		DroppedMetadata:             s.stats.droppedMetadata.Load(),
		Retries:                     s.stats.retries.Load(),
		SpuriousMessages:            s.stats.spurious.Load(),
		ClearRouteCacheIgnored:      s.stats.clearRouteIgnored.Load(),
		RetryOverflow:               s.stats.retryOverflow.Load(),
		RetryLimitExceeded:          s.stats.retryLimitExceeded.Load(),
		RetryBackoffRateLimited:     s.stats.retryRateLimited.Load(),
		RetryOrShadowAbandoned:      s.stats.retryAbandoned.Load(),
		LbHealthyPanic:              s.stats.lbPanic.Load(),
		NoHealthyUpstream:           s.stats.noHealthy.Load(),
		UpstreamImmediateResponses:  s.stats.immediateUpstream.Load(),
		RateLimitOverLimit:          s.stats.rlOverLimit.Load(),
		RateLimitError:              s.stats.rlError.Load(),
		RateLimitFailureModeAllowed: s.stats.rlFailOpen.Load(),
	}
}

// Records returns what the sim did, oldest first.
func (s *Sim) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Record(nil), s.records...)
}

// RecordFor returns the newest record whose request id, or the id the
// client sent, is id. A record is written when the request's stream is
// destroyed, which may be after the client has its response: WaitRecord
// waits for it.
func (s *Sim) RecordFor(id string) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.records) - 1; i >= 0; i-- {
		if s.records[i].RequestID == id || (id != "" && s.records[i].ClientRequestID == id) {
			return s.records[i], true
		}
	}
	return Record{}, false
}

// SetHealthy flips an endpoint's health, as an EDS update would.
func (s *Sim) SetHealthy(cluster, address string, healthy bool) {
	s.setEndpoint(cluster, address, func(e *Endpoint) { e.Unhealthy = !healthy })
}

// SetWeight sets an endpoint's weight (its locality's weight times its
// own), as an EDS update would.
func (s *Sim) SetWeight(cluster, address string, weight int) {
	s.setEndpoint(cluster, address, func(e *Endpoint) { e.Weight = weight })
}

// setEndpoint applies set to the cluster's endpoints at address.
func (s *Sim) setEndpoint(cluster, address string, set func(*Endpoint)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clusters[cluster]; c != nil {
		for i := range c.Endpoints {
			if c.Endpoints[i].Address == address {
				set(&c.Endpoints[i])
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
	close(s.recorded)
	s.recorded = make(chan struct{})
	s.mu.Unlock()
}

// WaitRecord waits until the request with this id is recorded: after its
// stream was destroyed, the stream-done rate-limit call included. The
// client can have the whole response before that.
func (s *Sim) WaitRecord(ctx context.Context, id string) (Record, error) {
	for {
		s.mu.Lock()
		ch := s.recorded
		s.mu.Unlock()
		if r, ok := s.RecordFor(id); ok {
			return r, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Record{}, fmt.Errorf("envoysim: no record for %s: %w", id, ctx.Err())
		}
	}
}

// AwaitRecord is WaitRecord bounded by within, for tests: the record of
// the request the client sent with x-request-id id, and whether it came.
func (s *Sim) AwaitRecord(id string, within time.Duration) (Record, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	r, err := s.WaitRecord(ctx, id)
	return r, err == nil
}

// resourcesFor is the cluster's resource manager (shared by its requests).
func (s *Sim) resourcesFor(cluster string) *clusterResources {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.resources[cluster]
	if r == nil {
		r = &clusterResources{}
		s.resources[cluster] = r
	}
	return r
}

// takeIdle takes a kept-alive connection to addr, if there is one.
func (s *Sim) takeIdle(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle[addr] == 0 {
		return false
	}
	s.idle[addr]--
	return true
}

func (s *Sim) putIdle(addr string) {
	s.mu.Lock()
	s.idle[addr]++
	s.mu.Unlock()
}

// newUUID is a random (version 4) UUID, the form of Envoy's generated
// x-request-id (Random::RandomGeneratorImpl::uuid).
func newUUID() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
