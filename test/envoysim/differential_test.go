package envoysim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/swarmgate/swarmgate/internal/envoytest"
)

// The differential suite: every case runs the same script — scripted
// ext_proc and rate-limit servers, the same upstreams, the same request —
// once through the sim and once through a real Envoy given the equivalent
// configuration (ToXDS), and fails when what the outside world observes
// differs: the client's status, headers and body; each request the
// upstreams received (headers, path, body, how many); every ext_proc
// message in order with its content; every rate-limit call's descriptors.
// Each case also checks the behaviour itself, so two equally wrong sides
// still fail.

// diffCase is one script.
type diffCase struct {
	name string
	// script answers ext_proc messages; nil passes every phase.
	script script
	// upstreams are the upstream servers' handlers; nil is a plain 200.
	upstreams []upstreamHandler
	// rls answers rate-limit calls; rateLimit is the HCM's rate-limit
	// filter (nil: none).
	rls       func(*rlspb.RateLimitRequest) *rlspb.RateLimitResponse
	rateLimit *ratelimitv3.RateLimit
	config    func(e diffEnv) Config
	req       diffRequest
	// timing, when set, is how long the upstream holds its body back: the
	// observation then says whether the client had the headers well before
	// the body (half of timing).
	timing time.Duration
	// check asserts the behaviour on the observation of either side.
	check func(t *testing.T, o *observation)
}

// diffEnv are the addresses of one run's servers.
type diffEnv struct {
	proc string
	up   []string
}

type diffRequest struct {
	method string
	path   string
	header map[string]string
	body   string
	// goneOnUpstream: the client goes away once an upstream has the
	// request.
	goneOnUpstream bool
}

// upstreamHandler answers the n-th request (from 1) an upstream received.
type upstreamHandler func(n int, w http.ResponseWriter, r *http.Request)

func answer(code int) upstreamHandler {
	return func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "text/plain")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "hello")
	}
}

// recorder is an upstream that records what it received.
type recorder struct {
	mu      sync.Mutex
	seen    []seenRequest
	arrived chan struct{} // a request reached an upstream
}

type seenRequest struct {
	upstream int
	method   string
	uri      string
	host     string
	header   http.Header
	length   int64
	te       []string
	body     string
}

// observation is what one side did, seen from outside.
type observation struct {
	status   int
	header   http.Header
	body     string
	err      string
	upstream []seenRequest
	extproc  []seenMsg
	rls      []*rlspb.RateLimitRequest
	// stats are the counters (statNames) the case moved.
	stats map[string]int64
	// headersEarly: the client had the response headers well before the
	// body (diffCase.timing).
	headersEarly *bool
	// replace normalises run-specific addresses.
	replace *strings.Replacer
}

func (o *observation) attempts() int { return len(o.upstream) }

// messages returns the ext_proc messages of a role and phase.
func (o *observation) messages(role, phase string) []seenMsg {
	var out []seenMsg
	for _, m := range o.extproc {
		if m.role == role && (phase == "" || phaseOfReq(m.req) == phase) {
			out = append(out, m)
		}
	}
	return out
}

// runSide runs c once: front builds the listener (sim or Envoy) and
// returns its address.
func runSide(t *testing.T, c diffCase, front frontFunc) *observation {
	t.Helper()
	sc := c.script
	if sc == nil {
		sc = func(_ string, _ int, req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
			return one(pass(req))
		}
	}
	p, procAddr := startScript(t, sc)
	rec := &recorder{arrived: make(chan struct{}, 1)}
	env := diffEnv{proc: procAddr}
	hs := c.upstreams
	if len(hs) == 0 {
		hs = []upstreamHandler{nil}
	}
	var pairs []string
	for i, h := range hs {
		if h == nil {
			h = answer(200)
		}
		addr := rec.serve(t, i, h)
		env.up = append(env.up, addr)
		pairs = append(pairs, addr, fmt.Sprintf("UP%d", i))
	}
	var rls *scriptRLS
	var rlsAddr string
	var client rlspb.RateLimitServiceClient
	if c.rateLimit != nil {
		rls = &scriptRLS{answer: c.rls}
		client, rlsAddr = startRLSAddr(t, rls)
	}
	cfg := c.config(env)
	addr, counters := front(cfg, c.rateLimit, rlsAddr, client)
	before := counters()
	pairs = append(pairs, addr, "FRONT")

	o := &observation{replace: strings.NewReplacer(pairs...)}
	r := c.req
	if r.method == "" {
		r.method = http.MethodPost
	}
	if r.path == "" {
		r.path = "/v1/x"
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if r.goneOnUpstream {
		go func() {
			select {
			case <-rec.arrived:
			case <-time.After(5 * time.Second):
			}
			cancel()
		}()
	}
	req, _ := http.NewRequestWithContext(ctx, r.method, "http://"+addr+r.path, strings.NewReader(r.body))
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	cl := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}}
	start := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		o.err = err.Error()
	} else {
		headersAt := time.Since(start)
		b, err := io.ReadAll(resp.Body)
		if c.timing > 0 {
			o.headersEarly = new(bool)
			*o.headersEarly = time.Since(start)-headersAt > c.timing/2
			t.Logf("time to headers %v, to the body's end %v", headersAt.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		}
		resp.Body.Close()
		o.status, o.header, o.body = resp.StatusCode, resp.Header, string(b)
		if err != nil {
			o.err = "body: " + err.Error()
		}
	}
	// What follows the response (the last ext_proc messages, the
	// stream-done rate-limit call, made when the stream is destroyed) may
	// arrive after it: wait until every ext_proc stream has ended and
	// nothing new came for a while (longer with a rate-limit service).
	quiet := 120 * time.Millisecond
	if rls != nil {
		quiet = 300 * time.Millisecond
	}
	count := func() int {
		p.mu.Lock()
		n, open := len(p.got), p.open
		p.mu.Unlock()
		rec.mu.Lock()
		n += len(rec.seen)
		rec.mu.Unlock()
		if rls != nil {
			rls.mu.Lock()
			n += len(rls.got)
			rls.mu.Unlock()
		}
		if open > 0 {
			return -1 - n // not settled while a stream is open
		}
		return n
	}
	last, stable := count(), time.Now()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && (last < 0 || time.Since(stable) < quiet); {
		time.Sleep(20 * time.Millisecond)
		if n := count(); n != last {
			last, stable = n, time.Now()
		}
	}
	p.mu.Lock()
	o.extproc = append([]seenMsg(nil), p.got...)
	p.mu.Unlock()
	rec.mu.Lock()
	o.upstream = append([]seenRequest(nil), rec.seen...)
	rec.mu.Unlock()
	if rls != nil {
		rls.mu.Lock()
		o.rls = append([]*rlspb.RateLimitRequest(nil), rls.got...)
		rls.mu.Unlock()
	}
	o.stats = map[string]int64{}
	after := counters()
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			o.stats[k] = d
		}
	}
	return o
}

// frontFunc builds the listener (sim or Envoy) for a case and returns its
// address and a reader of its counters (statNames).
type frontFunc func(cfg Config, rl *ratelimitv3.RateLimit, rlsAddr string, rlsClient rlspb.RateLimitServiceClient) (string, func() map[string]int64)

// statNames map the sim's counters to Envoy's stats, by the name's end
// (summed over the router-level scope http.envoysim.* and every cluster's).
var statNames = []struct {
	envoy string
	sim   func(Stats) int64
}{
	{"ext_proc.streams_started", func(s Stats) int64 { return s.Streams }},
	{"ext_proc.spurious_msgs_received", func(s Stats) int64 { return s.SpuriousMessages }},
	{"ext_proc.rejected_header_mutations", func(s Stats) int64 { return s.RejectedHeaderMutations }},
	{"ext_proc.clear_route_cache_ignored", func(s Stats) int64 { return s.ClearRouteCacheIgnored }},
	{"ext_proc.message_timeouts", func(s Stats) int64 { return s.MessageTimeouts }},
	{"ext_proc.failure_mode_allowed", func(s Stats) int64 { return s.FailureModeAllowed }},
	{"upstream_rq_retry", func(s Stats) int64 { return s.Retries }},
	{"upstream_rq_retry_overflow", func(s Stats) int64 { return s.RetryOverflow }},
	{"upstream_rq_retry_limit_exceeded", func(s Stats) int64 { return s.RetryLimitExceeded }},
	{"upstream_rq_retry_backoff_ratelimited", func(s Stats) int64 { return s.RetryBackoffRateLimited }},
	{"retry_or_shadow_abandoned", func(s Stats) int64 { return s.RetryOrShadowAbandoned }},
	{"upstream_cx_none_healthy", func(s Stats) int64 { return s.NoHealthyUpstream }},
	{"ratelimit.over_limit", func(s Stats) int64 { return s.RateLimitOverLimit }},
	{"ratelimit.error", func(s Stats) int64 { return s.RateLimitError }},
}

func simCounters(s *Sim) func() map[string]int64 {
	return func() map[string]int64 {
		st := s.Stats()
		out := map[string]int64{}
		for _, n := range statNames {
			out[n.envoy] = n.sim(st)
		}
		return out
	}
}

// envoyCounters sums Envoy's counters by statNames.
func envoyCounters(t *testing.T, e *realEnvoy) func() map[string]int64 {
	return func() map[string]int64 {
		dump, err := e.adminGet("/stats?usedonly")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, l := range strings.Split(dump, "\n") {
			k, v, ok := strings.Cut(l, ": ")
			if !ok || !(strings.HasPrefix(k, "http.envoysim.") || strings.HasPrefix(k, "cluster.")) {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				continue
			}
			for _, sn := range statNames {
				// 1.38.3 names the upstream ext_proc's stats
				// cluster.<c>.cluster.<c>ext_proc.* (no dot), 1.40.0
				// cluster.<c>.ext_proc.*.
				if strings.HasSuffix(k, "."+sn.envoy) || (strings.HasPrefix(sn.envoy, "ext_proc.") && strings.HasSuffix(k, sn.envoy)) {
					out[sn.envoy] += n
				}
			}
		}
		return out
	}
}

func (rec *recorder) serve(t *testing.T, i int, h upstreamHandler) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var mu sync.Mutex
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.seen = append(rec.seen, seenRequest{upstream: i, method: r.Method, uri: r.RequestURI, host: r.Host, header: r.Header.Clone(),
			length: r.ContentLength, te: r.TransferEncoding, body: string(b)})
		rec.mu.Unlock()
		select {
		case rec.arrived <- struct{}{}:
		default:
		}
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		h(k, w, r)
	})}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return lis.Addr().String()
}

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// volatile headers: their values differ run to run.
var volatile = map[string]bool{"date": true, "x-envoy-upstream-service-time": true}

// headerValue normalises a header's value for comparison: volatile ones
// are hidden, the expected timeout is rounded to 100 ms (it is what is left
// of the route timeout when the attempt starts).
func (o *observation) headerValue(k, v string) string {
	switch {
	case volatile[k]:
		return "<volatile>"
	case k == "x-forwarded-for":
		// The peer address Envoy sees depends on the machine's network
		// (a sandbox showed 192.0.2.2 for a loopback client).
		return "<peer>"
	case k == "x-envoy-expected-rq-timeout-ms":
		if n, err := strconv.Atoi(v); err == nil {
			return "~" + strconv.Itoa((n+50)/100*100)
		}
	}
	return o.norm(v)
}

func (o *observation) norm(s string) string {
	return uuidRE.ReplaceAllString(o.replace.Replace(s), "<uuid>")
}

func (o *observation) headerLines(prefix string, h http.Header) []string {
	var out []string
	for k, vs := range h {
		k = strings.ToLower(k)
		for _, v := range vs {
			out = append(out, fmt.Sprintf("%s %s: %s", prefix, k, o.headerValue(k, v)))
		}
	}
	sort.Strings(out)
	return out
}

// lines renders the observation canonically, one fact a line.
func (o *observation) lines() []string {
	out := []string{fmt.Sprintf("client status %d err %q", o.status, o.norm(o.err))}
	out = append(out, o.headerLines("client header", o.header)...)
	out = append(out, fmt.Sprintf("client body %q", o.norm(o.body)))
	if o.headersEarly != nil {
		out = append(out, fmt.Sprintf("client had the headers before the body: %v", *o.headersEarly))
	}
	for i, u := range o.upstream {
		p := fmt.Sprintf("upstream#%d UP%d", i+1, u.upstream)
		out = append(out, fmt.Sprintf("%s %s %s host=%s length=%d te=%v", p, u.method, o.norm(u.uri), o.norm(u.host), u.length, u.te))
		out = append(out, o.headerLines(p+" header", u.header)...)
		out = append(out, fmt.Sprintf("%s body %q", p, u.body))
	}
	for i, m := range o.extproc {
		p := fmt.Sprintf("extproc#%d %s/%d %s", i+1, m.role, m.stream, phaseOfReq(m.req))
		var hs []string
		var eos bool
		var body []byte
		switch {
		case m.req.GetRequestHeaders() != nil || m.req.GetResponseHeaders() != nil:
			hh := m.req.GetRequestHeaders()
			if hh == nil {
				hh = m.req.GetResponseHeaders()
			}
			eos = hh.GetEndOfStream()
			for _, h := range hh.GetHeaders().GetHeaders() {
				v := o.headerValue(h.GetKey(), string(h.GetRawValue()))
				hs = append(hs, fmt.Sprintf("%s header %s: %s value=%q", p, h.GetKey(), v, h.GetValue()))
			}
			sort.Strings(hs)
		case m.req.GetRequestBody() != nil:
			eos, body = m.req.GetRequestBody().GetEndOfStream(), m.req.GetRequestBody().GetBody()
		case m.req.GetResponseBody() != nil:
			eos, body = m.req.GetResponseBody().GetEndOfStream(), m.req.GetResponseBody().GetBody()
		}
		out = append(out, fmt.Sprintf("%s eos=%v body=%q", p, eos, body))
		out = append(out, hs...)
		rest := proto.Clone(m.req).(*extprocv3.ProcessingRequest)
		rest.Request = nil
		if j := stableJSON(rest); j != "{}" {
			out = append(out, p+" fields "+o.norm(j))
		}
	}
	for i, r := range o.rls {
		out = append(out, fmt.Sprintf("ratelimit#%d domain=%s descriptors=%s", i+1, r.GetDomain(), d(r.GetDescriptors())))
	}
	for _, n := range statNames {
		if v := o.stats[n.envoy]; v != 0 {
			out = append(out, fmt.Sprintf("stat %s +%d", n.envoy, v))
		}
	}
	return out
}

// stableJSON renders a message with sorted keys (protojson's spacing is
// deliberately unstable).
func stableJSON(m proto.Message) string {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err.Error()
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err.Error()
	}
	b, _ = json.Marshal(v)
	return string(b)
}

// compare fails t with a line diff when the observations differ.
func compare(t *testing.T, sim, real *observation) {
	t.Helper()
	a, b := sim.lines(), real.lines()
	if strings.Join(a, "\n") == strings.Join(b, "\n") {
		return
	}
	diff := append(missing("- sim:   ", a, b), missing("+ envoy: ", b, a)...)
	if len(diff) == 0 {
		diff = append(diff, "(same lines, another order)", "sim:\n  "+strings.Join(a, "\n  "), "envoy:\n  "+strings.Join(b, "\n  "))
	}
	t.Errorf("the sim and Envoy disagree:\n%s", strings.Join(diff, "\n"))
}

// missing returns the lines of a that b lacks (as a multiset), prefixed.
func missing(prefix string, a, b []string) []string {
	inB := map[string]int{}
	for _, l := range b {
		inB[l]++
	}
	var out []string
	for _, l := range a {
		if inB[l] > 0 {
			inB[l]--
			continue
		}
		out = append(out, prefix+l)
	}
	return out
}

// simFront starts the sim for a case from the very resources Envoy gets
// (ToXDS, then FromXDS), so the suite checks both translations too.
func simFront(t *testing.T) frontFunc {
	return func(cfg Config, rl *ratelimitv3.RateLimit, rlsAddr string, client rlspb.RateLimitServiceClient) (string, func() map[string]int64) {
		x, err := ToXDS(cfg, XDSTarget{ListenerName: "sim", Port: 1, RateLimit: rl, RateLimitAddr: rlsAddr})
		if err != nil {
			t.Fatal(err)
		}
		s, err := FromXDS(x.Listener, nil, x.Clusters, nil, XDSOptions{RoleHeader: "role", RateLimitClient: client})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		if err := s.Start(ctx, "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		return strings.TrimPrefix(s.URL(), "http://"), simCounters(s)
	}
}

// envoyFront pushes the case's config to the shared Envoy.
func envoyFront(t *testing.T, e *realEnvoy, n int) frontFunc {
	return func(cfg Config, rl *ratelimitv3.RateLimit, rlsAddr string, _ rlspb.RateLimitServiceClient) (string, func() map[string]int64) {
		// Port 0: Envoy binds a free port, which apply reads back.
		x, err := ToXDS(cfg, XDSTarget{ListenerName: fmt.Sprintf("case%d", n), Port: 0, RateLimit: rl, RateLimitAddr: rlsAddr})
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Validate(); err != nil {
			t.Fatal(err)
		}
		addr := e.apply(t, x)
		// A cluster replaced by the new config gets new counters under the
		// same name: start every case from zero.
		if _, err := e.adminPost("/reset_counters"); err != nil {
			t.Fatal(err)
		}
		return addr, envoyCounters(t, e)
	}
}

// TestModelAgainstEnvoy runs every differential case on the sim and on
// each pinned Envoy release (one Envoy process per release, reconfigured
// over ADS between cases). The sim models one behaviour for every release,
// so it runs each case once and its observation is compared with each.
func TestModelAgainstEnvoy(t *testing.T) {
	cases := diffCases()
	sims := make([]*observation, len(cases))
	envoytest.Each(t, func(t *testing.T, rel envoytest.Release) {
		e := startRealEnvoy(t, rel)
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				if sims[i] == nil {
					sims[i] = runSide(t, c, simFront(t))
					if c.check != nil {
						t.Run("sim", func(t *testing.T) { c.check(t, sims[i]) })
					}
				}
				real := runSide(t, c, envoyFront(t, e, i))
				compare(t, sims[i], real)
				if c.check != nil {
					t.Run("envoy", func(t *testing.T) { c.check(t, real) })
				}
			})
		}
	})
}
