// Package loadgen drives an ext_proc server the way Envoy does for
// swarmgate's processing modes and measures it: N concurrent requests,
// each a router-level stream (request headers, buffered body, response
// headers, streamed response body) wrapped around one upstream-level
// per-attempt stream (request headers with request_attributes, response
// headers), at a fixed rate or closed loop. It reports throughput,
// per-message and per-request latency percentiles, and the server
// process's CPU time and peak RSS, as JSON and as an SVG chart.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// Options configure one load run.
type Options struct {
	// Addr is the ext_proc server (127.0.0.1:port).
	Addr string
	// Creds are the client's transport credentials; nil is plaintext.
	Creds credentials.TransportCredentials
	// Label names the run in reports, e.g. "swarmgate".
	Label    string
	Scenario Scenario
	// Streams is the number of requests in flight (closed loop) or the
	// cap on them (fixed rate). Each holds one router-level stream and,
	// during its upstream phase, one upstream-level stream.
	Streams int
	// Conns is the number of gRPC connections the streams share. Envoy's
	// gRPC client multiplexes a cluster's streams on one HTTP/2 connection
	// per worker thread; default 2 (one per core here).
	Conns int
	// Rate is the request arrival rate per second; 0 runs closed loop
	// (every stream starts its next request when the last one ends).
	// Request latency in fixed-rate mode counts from the scheduled start,
	// so a stalled server is not hidden (no coordinated omission).
	Rate float64
	// Warmup runs before measuring; Duration is the measured window.
	Warmup, Duration time.Duration
	// Requests, when set, ends the measured window early once that many
	// requests completed (smoke tests).
	Requests uint64
	// ChunkInterval pauses between response body chunks, as a token-
	// streaming upstream does; it keeps streams open (memory tests).
	ChunkInterval time.Duration
	// ServerPID is the process whose CPU and memory are measured; 0 means
	// this process (server in-process: figures include the load generator).
	ServerPID int
}

// Phases of the per-message histograms.
const (
	PhaseRouterRequestHeaders = iota
	PhaseRouterRequestBody
	PhaseUpstreamRequestHeaders
	PhaseUpstreamRequestBody
	PhaseUpstreamResponseHeaders
	PhaseRouterResponseHeaders
	PhaseRouterResponseBody
	phaseCount
)

var phaseNames = [phaseCount]string{"router_request_headers", "router_request_body", "upstream_request_headers",
	"upstream_request_body", "upstream_response_headers", "router_response_headers", "router_response_body"}

// Work counts answers that show the server did its job: routing headers
// on the request body, a credential on the attempt, backend tags on the
// attempt's response, usage metadata at the end of the response. A
// do-nothing server scores zero everywhere.
type Work struct {
	Routed      uint64 `json:"routed"`
	Credentials uint64 `json:"credentials"`
	Tagged      uint64 `json:"tagged"`
	Usage       uint64 `json:"usage_metadata"`
	BodyRewrite uint64 `json:"body_rewrites"`
}

// Proc is a process's resource use over the measured window.
type Proc struct {
	PID             int     `json:"pid"`
	CPUSeconds      float64 `json:"cpu_seconds"`
	CPUCores        float64 `json:"cpu_cores"` // CPU seconds per wall second
	CPUPerRequestUS float64 `json:"cpu_per_request_us"`
	RSSMB           float64 `json:"rss_mb"`
	PeakRSSMB       float64 `json:"peak_rss_mb"` // VmHWM
}

// Result is one run's figures.
type Result struct {
	Label           string             `json:"label"`
	Scenario        Scenario           `json:"scenario"`
	Streams         int                `json:"streams"`
	Conns           int                `json:"conns"`
	RateTarget      float64            `json:"rate_target"`
	ChunkIntervalMS float64            `json:"chunk_interval_ms"`
	InProcess       bool               `json:"in_process"`
	GOMAXPROCS      int                `json:"loadgen_gomaxprocs"`
	NumCPU          int                `json:"num_cpu"`
	Started         time.Time          `json:"started"`
	Seconds         float64            `json:"seconds"`
	Requests        uint64             `json:"requests"`
	Messages        uint64             `json:"messages"`
	Errors          uint64             `json:"errors"`
	FirstError      string             `json:"first_error,omitempty"`
	Refused         uint64             `json:"refused"`
	Missed          uint64             `json:"missed_arrivals"`
	RPS             float64            `json:"requests_per_second"`
	MPS             float64            `json:"messages_per_second"`
	PeakInFlight    int64              `json:"peak_in_flight_streams"`
	Request         Summary            `json:"request_latency"`
	Message         Summary            `json:"message_latency"`
	Phases          map[string]Summary `json:"phase_latency"`
	Work            Work               `json:"work"`
	Server          Proc               `json:"server"`
	Loadgen         Proc               `json:"loadgen"`
}

// stats is one shard of the run's counters; workers lock a shard only to
// add one finished exchange.
type stats struct {
	mu       sync.Mutex
	request  Histogram
	message  Histogram
	phases   [phaseCount]Histogram
	requests uint64
	messages uint64
	refused  uint64
	work     Work
}

// sample is one exchange's measurements, kept by the worker until it is
// added to a shard.
type sample struct {
	phase   [24]uint8
	lat     [24]time.Duration
	extra   []time.Duration // response chunks beyond the array
	n       int
	request time.Duration
	refused bool
	work    Work
}

func (s *sample) add(phase int, d time.Duration) {
	if s.n < len(s.lat) {
		s.phase[s.n], s.lat[s.n] = uint8(phase), d
	} else {
		s.extra = append(s.extra, d) // always router_response_body
	}
	s.n++
}

// Run drives the server at opts.Addr and returns the measured figures.
func Run(ctx context.Context, opts Options) (*Result, error) {
	sc, err := opts.Scenario.withDefaults()
	if err != nil {
		return nil, err
	}
	if opts.Streams <= 0 {
		opts.Streams = 64
	}
	if opts.Conns <= 0 {
		opts.Conns = 2
	}
	if opts.Duration <= 0 {
		opts.Duration = 10 * time.Second
	}
	inProcess := opts.ServerPID == 0
	if inProcess {
		opts.ServerPID = os.Getpid()
	}
	x := newExchange(sc)

	conns := make([]*grpc.ClientConn, opts.Conns)
	for i := range conns {
		creds := opts.Creds
		if creds == nil {
			creds = insecure.NewCredentials()
		}
		c, err := grpc.NewClient(opts.Addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, fmt.Errorf("loadgen: dial %s: %w", opts.Addr, err)
		}
		defer c.Close()
		conns[i] = c
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// stop ends the run the way a client winds down: no new requests, the
	// ones in flight finish. Cancelling them instead would end their
	// upstream attempts without response headers, which the server under
	// test may rightly treat as upstream failures, and a comparison keeps
	// the same server up for many runs.
	stop := make(chan struct{})
	shards := make([]stats, max(4, 2*runtime.GOMAXPROCS(0)))
	var (
		measuring atomic.Bool
		inFlight  flight
		errCount  atomic.Uint64
		firstErr  atomic.Pointer[string]
		missed    atomic.Uint64
		completed atomic.Uint64
		reached   = make(chan struct{})
	)
	var tickets chan time.Time
	if opts.Rate > 0 {
		tickets = make(chan time.Time, opts.Streams)
		go schedule(runCtx, opts.Rate, tickets, &missed, &measuring)
	}

	var wg sync.WaitGroup
	for i := range opts.Streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &worker{x: x, m: x.messages(), client: extprocv3.NewExternalProcessorClient(conns[i%len(conns)]),
				routerCtx: metadata.AppendToOutgoingContext(runCtx, contract.GRPCRoleHeader, contract.RoleRouter),
				upCtx:     metadata.AppendToOutgoingContext(runCtx, contract.GRPCRoleHeader, contract.RoleUpstream),
				interval:  opts.ChunkInterval, inFlight: &inFlight, idPrefix: "lg-" + strconv.Itoa(i) + "-"}
			sh := &shards[i%len(shards)]
			var s sample
			for runCtx.Err() == nil {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				if tickets != nil {
					select {
					case start = <-tickets:
					case <-runCtx.Done():
						return
					case <-stop:
						return
					}
				}
				s = sample{extra: s.extra[:0]}
				err := w.exchange(&s, start)
				if !measuring.Load() {
					continue
				}
				if err != nil {
					if runCtx.Err() != nil {
						return
					}
					errCount.Add(1)
					msg := err.Error()
					firstErr.CompareAndSwap(nil, &msg)
					continue
				}
				sh.add(&s)
				if n := completed.Add(1); n == opts.Requests {
					close(reached)
				}
			}
		}()
	}

	if opts.Warmup > 0 {
		select {
		case <-time.After(opts.Warmup):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	srv0, err := ReadProc(opts.ServerPID)
	if err != nil {
		return nil, err
	}
	self0, _ := ReadProc(os.Getpid())
	started := time.Now()
	inFlight.startPeak()
	measuring.Store(true)
	select {
	case <-time.After(opts.Duration):
	case <-reached:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	measuring.Store(false)
	peak := inFlight.stopPeak()
	elapsed := time.Since(started)
	srv1, err := ReadProc(opts.ServerPID)
	if err != nil {
		return nil, err
	}
	self1, _ := ReadProc(os.Getpid())
	close(stop)
	if !drain(&wg, drainTimeout(opts, sc)) {
		cancel() // a stalled server: cut what is still in flight
		wg.Wait()
	}

	r := &Result{Label: opts.Label, Scenario: sc, Streams: opts.Streams, Conns: opts.Conns, RateTarget: opts.Rate,
		ChunkIntervalMS: float64(opts.ChunkInterval) / 1e6, InProcess: inProcess, GOMAXPROCS: runtime.GOMAXPROCS(0),
		NumCPU: runtime.NumCPU(), Started: started.UTC(), Seconds: elapsed.Seconds(), Errors: errCount.Load(),
		Missed: missed.Load(), PeakInFlight: peak, Phases: map[string]Summary{}}
	if p := firstErr.Load(); p != nil {
		r.FirstError = *p
	}
	var req, msg Histogram
	var phases [phaseCount]Histogram
	for i := range shards {
		sh := &shards[i]
		req.Merge(&sh.request)
		msg.Merge(&sh.message)
		for p := range phases {
			phases[p].Merge(&sh.phases[p])
		}
		r.Requests += sh.requests
		r.Messages += sh.messages
		r.Refused += sh.refused
		r.Work.Routed += sh.work.Routed
		r.Work.Credentials += sh.work.Credentials
		r.Work.Tagged += sh.work.Tagged
		r.Work.Usage += sh.work.Usage
		r.Work.BodyRewrite += sh.work.BodyRewrite
	}
	r.Request, r.Message = req.Summary(), msg.Summary()
	for p := range phases {
		if phases[p].Count() > 0 {
			r.Phases[phaseNames[p]] = phases[p].Summary()
		}
	}
	r.RPS = float64(r.Requests) / elapsed.Seconds()
	r.MPS = float64(r.Messages) / elapsed.Seconds()
	r.Server = procDelta(opts.ServerPID, srv0, srv1, elapsed, r.Requests)
	r.Loadgen = procDelta(os.Getpid(), self0, self1, elapsed, r.Requests)
	return r, nil
}

// flight counts the requests in flight and, between startPeak and
// stopPeak, the most there were at once (exactly: a sampled peak misses
// short runs).
type flight struct {
	n, peak atomic.Int64
	on      atomic.Bool
}

func (f *flight) enter() {
	n := f.n.Add(1)
	if !f.on.Load() {
		return
	}
	for p := f.peak.Load(); n > p && !f.peak.CompareAndSwap(p, n); p = f.peak.Load() {
	}
}

func (f *flight) leave() { f.n.Add(-1) }

func (f *flight) startPeak() {
	f.peak.Store(f.n.Load())
	f.on.Store(true)
}

func (f *flight) stopPeak() int64 {
	f.on.Store(false)
	return f.peak.Load()
}

// drain waits up to d for wg; it reports whether everything finished.
func drain(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// drainTimeout bounds the wind-down: a request's paced chunks plus slack.
func drainTimeout(opts Options, sc Scenario) time.Duration {
	return 10*time.Second + time.Duration(len(newExchange(sc).chunks))*opts.ChunkInterval
}

func procDelta(pid int, a, b ProcSample, elapsed time.Duration, requests uint64) Proc {
	cpu := (b.CPU - a.CPU).Seconds()
	p := Proc{PID: pid, CPUSeconds: cpu, CPUCores: round3(cpu / elapsed.Seconds()),
		RSSMB: mb(b.RSSBytes), PeakRSSMB: mb(b.HWMBytes)}
	if requests > 0 {
		p.CPUPerRequestUS = round3(cpu / float64(requests) * 1e6)
	}
	return p
}

func mb(b int64) float64 { return round3(float64(b) / (1 << 20)) }
func round3(f float64) float64 {
	return float64(int64(f*1000+0.5)) / 1000
}

func (sh *stats) add(s *sample) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s.refused {
		sh.refused++
		return
	}
	sh.requests++
	sh.messages += uint64(s.n)
	sh.request.Record(s.request)
	for i := 0; i < min(s.n, len(s.lat)); i++ {
		sh.message.Record(s.lat[i])
		sh.phases[s.phase[i]].Record(s.lat[i])
	}
	for _, d := range s.extra {
		sh.message.Record(d)
		sh.phases[PhaseRouterResponseBody].Record(d)
	}
	sh.work.Routed += s.work.Routed
	sh.work.Credentials += s.work.Credentials
	sh.work.Tagged += s.work.Tagged
	sh.work.Usage += s.work.Usage
	sh.work.BodyRewrite += s.work.BodyRewrite
}

// schedule emits one ticket (the intended start time) per 1/rate seconds.
// When every stream is busy the ticket is dropped and counted as missed.
func schedule(ctx context.Context, rate float64, out chan<- time.Time, missed *atomic.Uint64, measuring *atomic.Bool) {
	interval := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for !next.After(now) {
				select {
				case out <- next:
				default:
					if measuring.Load() {
						missed.Add(1)
					}
				}
				next = next.Add(interval)
			}
		}
	}
}

// worker runs one stream slot's exchanges.
type worker struct {
	x         *exchange
	m         *messages
	client    extprocv3.ExternalProcessorClient
	routerCtx context.Context
	upCtx     context.Context
	interval  time.Duration
	inFlight  *flight
	idPrefix  string
	seq       int
	idBuf     []byte
}

// roundTrip sends one message and waits for its answer, as Envoy does for
// every phase it sends in these modes.
func roundTrip(st extprocv3.ExternalProcessor_ProcessClient, req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, time.Duration, error) {
	t0 := time.Now()
	if err := st.Send(req); err != nil {
		return nil, 0, err
	}
	resp, err := st.Recv()
	return resp, time.Since(t0), err
}

// closeStream half-closes and reads the server's end of stream.
func closeStream(st extprocv3.ExternalProcessor_ProcessClient) error {
	if err := st.CloseSend(); err != nil {
		return err
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		if err == nil {
			return errors.New("loadgen: message after the last phase")
		}
		return err
	}
	return nil
}

var errPhase = errors.New("loadgen: answer of the wrong phase")

// exchange runs one request in Envoy's order: router request headers and
// body; the attempt's upstream stream (request headers, the body if the
// server asks for it, response headers); router response headers and
// body chunks.
func (w *worker) exchange(s *sample, start time.Time) error {
	w.seq++
	w.idBuf = strconv.AppendInt(append(w.idBuf[:0], w.idPrefix...), int64(w.seq), 10)
	w.m.setRequestID(w.idBuf)
	m := w.m

	rt, err := w.client.Process(w.routerCtx)
	if err != nil {
		return err
	}
	w.inFlight.enter()
	defer w.inFlight.leave()
	resp, d, err := roundTrip(rt, m.routerHeaders)
	if err != nil {
		return err
	}
	s.add(PhaseRouterRequestHeaders, d)
	if resp.GetImmediateResponse() != nil {
		s.refused = true
		return closeStream(rt)
	}
	if resp.GetRequestHeaders() == nil {
		return errPhase
	}
	resp, d, err = roundTrip(rt, m.routerBody)
	if err != nil {
		return err
	}
	s.add(PhaseRouterRequestBody, d)
	if resp.GetImmediateResponse() != nil {
		s.refused = true
		return closeStream(rt)
	}
	if resp.GetRequestBody() == nil {
		return errPhase
	}
	if hasSet(resp.GetRequestBody().GetResponse().GetHeaderMutation(), contract.HeaderPool) {
		s.work.Routed++
	}
	// As Envoy does: the dynamic metadata the router-level filter returned
	// (receiving_namespaces) reaches the attempt's upstream filter as
	// metadata_context (forwarding_namespaces).
	m.upHeaders.MetadataContext = nil
	if ns := resp.GetDynamicMetadata().GetFields()[contract.AdmissionNamespace].GetStructValue(); ns != nil {
		m.upHeaders.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{contract.AdmissionNamespace: ns}}
	}

	if err := w.attempt(s); err != nil {
		return err
	}

	resp, d, err = roundTrip(rt, m.routerResp)
	if err != nil {
		return err
	}
	s.add(PhaseRouterResponseHeaders, d)
	if resp.GetResponseHeaders() == nil {
		return errPhase
	}
	for i, c := range m.chunks {
		if w.interval > 0 && i > 0 {
			time.Sleep(w.interval) // the upstream generating the next tokens
		}
		resp, d, err = roundTrip(rt, c)
		if err != nil {
			return err
		}
		s.add(PhaseRouterResponseBody, d)
		if resp.GetResponseBody() == nil {
			return errPhase
		}
	}
	if resp.GetDynamicMetadata() != nil {
		s.work.Usage++
	}
	s.request = time.Since(start)
	return closeStream(rt)
}

// attempt is the per-attempt upstream-level stream.
func (w *worker) attempt(s *sample) error {
	m := w.m
	up, err := w.client.Process(w.upCtx)
	if err != nil {
		return err
	}
	resp, d, err := roundTrip(up, m.upHeaders)
	if err != nil {
		return err
	}
	s.add(PhaseUpstreamRequestHeaders, d)
	if resp.GetRequestHeaders() == nil {
		return errPhase
	}
	if hasSet(resp.GetRequestHeaders().GetResponse().GetHeaderMutation(), "authorization") {
		s.work.Credentials++
	}
	// A mode override asking for the body (allow_mode_override on the
	// upstream filter) makes Envoy send it before the attempt goes out.
	if resp.GetModeOverride().GetRequestBodyMode() == extprocfilter.ProcessingMode_BUFFERED {
		resp, d, err = roundTrip(up, m.upBody)
		if err != nil {
			return err
		}
		s.add(PhaseUpstreamRequestBody, d)
		if resp.GetRequestBody() == nil {
			return errPhase
		}
		if resp.GetRequestBody().GetResponse().GetBodyMutation() != nil {
			s.work.BodyRewrite++
		}
	}
	resp, d, err = roundTrip(up, m.upResponse)
	if err != nil {
		return err
	}
	s.add(PhaseUpstreamResponseHeaders, d)
	if resp.GetResponseHeaders() == nil {
		return errPhase
	}
	if hasSet(resp.GetResponseHeaders().GetResponse().GetHeaderMutation(), contract.HeaderBackend) {
		s.work.Tagged++
	}
	return closeStream(up)
}

func hasSet(m *extprocv3.HeaderMutation, name string) bool {
	for _, o := range m.GetSetHeaders() {
		if o.GetHeader().GetKey() == name {
			return true
		}
	}
	return false
}
