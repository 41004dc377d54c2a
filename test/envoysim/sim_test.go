package envoysim

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/structpb"
)

// testProc is a scripted ext_proc server: router streams set x-pool from the
// x-want header and answer immediate responses on x-deny; upstream streams
// echo the attempt number and endpoint metadata into headers.
type testProc struct {
	extprocv3.UnimplementedExternalProcessorServer
	mu    sync.Mutex
	seen  []string
	delay time.Duration
}

func (p *testProc) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
	md, _ := metadata.FromIncomingContext(st.Context())
	role := strings.Join(md.Get("role"), "")
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		p.mu.Lock()
		p.seen = append(p.seen, role+":"+phaseOfReq(req))
		p.mu.Unlock()
		if p.delay > 0 {
			time.Sleep(p.delay)
		}
		resp := &extprocv3.ProcessingResponse{}
		switch r := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			h := map[string]string{}
			for _, kv := range r.RequestHeaders.GetHeaders().GetHeaders() {
				if kv.GetValue() != "" {
					return nil // Envoy sends raw_value only
				}
				h[kv.GetKey()] = string(kv.GetRawValue())
			}
			if h["x-deny"] != "" {
				resp.Response = &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
					Status: &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden}, Body: []byte(`{"denied":true}`),
					Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("content-type", "application/json")}}}}
				break
			}
			var sets []*corev3.HeaderValueOption
			if role == "router" {
				sets = append(sets, set("x-pool", h["x-want"]), set(":authority", "evil"), set("x-envoy-foo", "1"), set("x-added", "a"))
			} else {
				attrs := req.GetAttributes()["envoy.filters.http.ext_proc"]
				var hm corev3.Metadata
				_ = prototext.Unmarshal([]byte(attrs.GetFields()["xds.upstream_host_metadata"].GetStringValue()), &hm)
				n := attrs.GetFields()["upstream.request_attempt_count"].GetNumberValue()
				sets = append(sets, set("x-backend", hm.GetFilterMetadata()["sg"].GetFields()["backend"].GetStringValue()),
					set("x-attempt", string(rune('0'+int(n)))), set(":path", "/rewritten"))
			}
			resp.Response = &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
				HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: sets, RemoveHeaders: []string{"x-remove", ":path-not", "host"}}, ClearRouteCache: true}}}
		case *extprocv3.ProcessingRequest_RequestBody:
			resp.Response = &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
				HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("content-length", "7")}},
				BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte("mutated")}}}}}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp.Response = &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			out := strings.ToUpper(string(r.ResponseBody.GetBody()))
			resp.Response = &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
				BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(out)}}}}}
			if r.ResponseBody.GetEndOfStream() {
				resp.DynamicMetadata, _ = structpb.NewStruct(map[string]any{"sg": map[string]any{"tokens": 3}, "other": map[string]any{"x": 1}})
			}
		}
		if err := st.Send(resp); err != nil {
			return nil
		}
	}
}

func phaseOfReq(r *extprocv3.ProcessingRequest) string {
	switch r.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return "request_headers"
	case *extprocv3.ProcessingRequest_RequestBody:
		return "request_body"
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return "response_headers"
	case *extprocv3.ProcessingRequest_ResponseBody:
		return "response_body"
	}
	return "other"
}

func set(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

func startProc(t *testing.T, p *testProc) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, p)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

type upstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
	body []string
}

func newUpstream(t *testing.T, status func(n int) int) *upstream {
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, r)
		u.body = append(u.body, string(b))
		n := len(u.reqs)
		u.mu.Unlock()
		w.WriteHeader(status(n))
		_, _ = io.WriteString(w, "hello from "+r.Header.Get("x-backend"))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) addr() string { return strings.TrimPrefix(u.srv.URL, "http://") }

func modes(reqBody, respBody extprocfilter.ProcessingMode_BodySendMode) *extprocfilter.ProcessingMode {
	return &extprocfilter.ProcessingMode{RequestHeaderMode: extprocfilter.ProcessingMode_SEND, ResponseHeaderMode: extprocfilter.ProcessingMode_SEND,
		RequestBodyMode: reqBody, ResponseBodyMode: respBody}
}

func newSim(t *testing.T, procAddr string, eps []Endpoint, rp *RetryPolicy) *Sim {
	t.Helper()
	s, err := New(Config{
		Routes: []Route{{Name: "pool-a", Headers: map[string]string{"x-pool": "a"}, Cluster: "a", Retry: rp}},
		Clusters: []Cluster{{Name: "a", Endpoints: eps, UpstreamFilter: &Filter{Target: procAddr, InitialMetadata: map[string]string{"role": "upstream"},
			Mode:              &extprocfilter.ProcessingMode{RequestHeaderMode: extprocfilter.ProcessingMode_SEND, ResponseHeaderMode: extprocfilter.ProcessingMode_SEND},
			RequestAttributes: []string{"xds.upstream_host_metadata", "upstream.request_attempt_count"}, MessageTimeout: time.Second}}},
		RouterFilter: &Filter{Target: procAddr, InitialMetadata: map[string]string{"role": "router"}, MessageTimeout: time.Second,
			Mode: modes(extprocfilter.ProcessingMode_BUFFERED, extprocfilter.ProcessingMode_STREAMED), ReceivingNamespaces: []string{"sg"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := s.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return s
}

func do(t *testing.T, s *Sim, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/x", strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestFlowMutationsRoutingAndMetadata(t *testing.T) {
	p := &testProc{}
	addr := startProc(t, p)
	up := newUpstream(t, func(int) int { return 200 })
	s := newSim(t, addr, []Endpoint{{Address: up.addr(), Metadata: map[string]map[string]string{"sg": {"backend": "b1"}}}}, nil)

	resp, body := do(t, s, map[string]string{"x-want": "a", "x-remove": "1", "x-request-id": "r1"}, "original")
	if resp.StatusCode != 200 || body != "HELLO FROM B1" {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	got := up.reqs[0]
	tests := []struct{ name, got, want string }{
		{"body mutated", up.body[0], "mutated"},
		{"route header", got.Header.Get("x-pool"), "a"},
		{"removed", got.Header.Get("x-remove"), ""},
		{":authority not mutable", got.Host, strings.TrimPrefix(s.URL(), "http://")},
		{"x-envoy not mutable", got.Header.Get("x-envoy-foo"), ""},
		{"upstream path", got.URL.Path, "/rewritten"},
		{"attempt attr", got.Header.Get("x-attempt"), "1"},
		{"host metadata attr", got.Header.Get("x-backend"), "b1"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %q want %q", tc.name, tc.got, tc.want)
		}
	}
	rec, _ := s.RecordFor("r1")
	if rec.DynamicMetadata["sg"]["tokens"] != float64(3) || rec.DynamicMetadata["other"] != nil {
		t.Errorf("metadata %v", rec.DynamicMetadata)
	}
	st := s.Stats()
	// router: :authority, x-envoy-foo, remove host and :path-not; upstream:
	// remove host and :path-not.
	if st.RejectedHeaderMutations != 6 || st.IgnoredClearRouteCache != 1 || st.DroppedMetadata != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestFlowNoRouteWithoutClearRouteMatch(t *testing.T) {
	p := &testProc{}
	addr := startProc(t, p)
	up := newUpstream(t, func(int) int { return 200 })
	s := newSim(t, addr, []Endpoint{{Address: up.addr()}}, nil)
	resp, _ := do(t, s, map[string]string{"x-want": "zzz"}, "b")
	if resp.StatusCode != 404 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func TestFlowImmediateResponse(t *testing.T) {
	addr := startProc(t, &testProc{})
	up := newUpstream(t, func(int) int { return 200 })
	s := newSim(t, addr, []Endpoint{{Address: up.addr()}}, nil)
	resp, body := do(t, s, map[string]string{"x-deny": "1"}, "b")
	if resp.StatusCode != 403 || body != `{"denied":true}` || resp.Header.Get("content-type") != "application/json" || len(up.reqs) != 0 {
		t.Fatalf("status %d body %q reqs %d", resp.StatusCode, body, len(up.reqs))
	}
}

func TestRetriesPreviousHostsAndPriorities(t *testing.T) {
	addr := startProc(t, &testProc{})
	bad := newUpstream(t, func(int) int { return 429 })
	bad2 := newUpstream(t, func(int) int { return 503 })
	good := newUpstream(t, func(int) int { return 200 })
	rp := &RetryPolicy{RetryOn: []string{"5xx", "reset", "connect-failure", "retriable-status-codes"}, RetriableStatusCodes: []int{429},
		NumRetries: 3, PreviousHosts: true, PreviousPriorities: true, BackoffBase: time.Millisecond}
	s := newSim(t, addr, []Endpoint{
		{Address: bad.addr(), Priority: 0, Metadata: map[string]map[string]string{"sg": {"backend": "bad"}}},
		{Address: "127.0.0.1:1", Priority: 0, Unhealthy: true},
		{Address: bad2.addr(), Priority: 1},
		{Address: good.addr(), Priority: 2, Metadata: map[string]map[string]string{"sg": {"backend": "good"}}},
	}, rp)
	resp, body := do(t, s, map[string]string{"x-want": "a", "x-request-id": "retry"}, "b")
	if resp.StatusCode != 200 || body != "HELLO FROM GOOD" {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	rec, _ := s.RecordFor("retry")
	if len(rec.Attempts) != 3 || rec.Attempts[0].Status != 429 || rec.Attempts[1].Status != 503 || rec.Attempts[2].Header.Get("x-attempt") != "3" {
		t.Fatalf("attempts %+v", rec.Attempts)
	}
}

func TestRetriesConnectFailureAndExhaustion(t *testing.T) {
	addr := startProc(t, &testProc{})
	bad := newUpstream(t, func(int) int { return 500 })
	rp := &RetryPolicy{RetryOn: []string{"connect-failure"}, NumRetries: 1, BackoffBase: time.Millisecond}
	// Port 1 on loopback refuses connections.
	s := newSim(t, addr, []Endpoint{{Address: "127.0.0.1:1"}, {Address: bad.addr(), Priority: 1}}, rp)
	rp.PreviousPriorities = true
	resp, _ := do(t, s, map[string]string{"x-want": "a", "x-request-id": "cf"}, "")
	rec, _ := s.RecordFor("cf")
	if resp.StatusCode != 500 || len(rec.Attempts) != 2 || !strings.HasPrefix(rec.Attempts[0].Err, "connect-failure") {
		t.Fatalf("status %d attempts %+v", resp.StatusCode, rec.Attempts)
	}
}

func TestMessageTimeoutAndFailureModeAllow(t *testing.T) {
	for _, allow := range []bool{false, true} {
		p := &testProc{delay: 300 * time.Millisecond}
		addr := startProc(t, p)
		up := newUpstream(t, func(int) int { return 200 })
		s, err := New(Config{
			Routes:       []Route{{Name: "all", Cluster: "a"}},
			Clusters:     []Cluster{{Name: "a", Endpoints: []Endpoint{{Address: up.addr()}}}},
			RouterFilter: &Filter{Target: addr, MessageTimeout: 50 * time.Millisecond, FailureModeAllow: allow, Mode: modes(0, 0)},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if err := s.Start(ctx, "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		resp, _ := do(t, s, nil, "")
		want := 504
		if allow {
			want = 200
		}
		if resp.StatusCode != want || s.Stats().MessageTimeouts != 1 {
			t.Errorf("allow=%v: status %d stats %+v", allow, resp.StatusCode, s.Stats())
		}
	}
}

// A client that goes away before the upstream answered resets its stream:
// Envoy destroys the filter chain, so the router-level ext_proc stream is
// closed without any response phase (no local 503 passes through it), and
// the attempt is cancelled.
func TestClientGoneBeforeResponse(t *testing.T) {
	p := &testProc{}
	addr := startProc(t, p)
	arrived := make(chan struct{}, 1)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // net/http notices a closed connection only once the body is read
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-r.Context().Done() // answers nothing until the attempt is cancelled
	}))
	t.Cleanup(slow.Close)
	s := newSim(t, addr, []Endpoint{{Address: strings.TrimPrefix(slow.URL, "http://"), Metadata: map[string]map[string]string{"sg": {"backend": "slow"}}}},
		&RetryPolicy{NumRetries: 2, RetryOn: []string{"5xx", "reset"}})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/v1/x", strings.NewReader("payload"))
	req.Header.Set("x-want", "a")
	req.Header.Set("x-request-id", "gone-1")
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the attempt never reached the upstream")
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled request got a response")
	}
	var rec Record
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, ok := s.RecordFor("gone-1")
		if ok && r.Aborted {
			rec = r
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no aborted record: %+v", r)
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.mu.Lock()
	seen := strings.Join(p.seen, " ")
	p.mu.Unlock()
	if strings.Contains(seen, "router:response_") {
		t.Errorf("the router-level filter saw a response phase of a request whose client was gone: %s", seen)
	}
	if len(rec.Attempts) != 1 {
		t.Errorf("attempts %+v: a request whose client is gone is not retried", rec.Attempts)
	}
}
