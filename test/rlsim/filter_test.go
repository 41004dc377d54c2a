package rlsim

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// scripted is a rate-limit service peer that returns a fixed answer, for
// the answer shapes the real service only produces with environment
// switches (response headers, raw body) or never (UNKNOWN).
type scripted struct {
	rlspb.UnimplementedRateLimitServiceServer
	resp  *rlspb.RateLimitResponse
	err   error
	delay time.Duration
}

func (s *scripted) ShouldRateLimit(ctx context.Context, _ *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.resp, s.err
}

func dialScripted(t *testing.T, s *scripted) rlspb.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(srv, s)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return rlspb.NewRateLimitServiceClient(cc)
}

func limitStatus(code rlspb.RateLimitResponse_Code, n, left uint32, unit rlspb.RateLimitResponse_RateLimit_Unit, reset int64) *rlspb.RateLimitResponse_DescriptorStatus {
	return &rlspb.RateLimitResponse_DescriptorStatus{Code: code,
		CurrentLimit:       &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: n, Unit: unit},
		LimitRemaining:     left,
		DurationUntilReset: durationpb.New(time.Duration(reset) * time.Second)}
}

func TestDecodeHeadersAnswers(t *testing.T) {
	gk := func(v string, o routev3.RateLimit_XRateLimitOption) *routev3.RateLimit {
		return &routev3.RateLimit{XRatelimitOption: o, Actions: []*routev3.RateLimit_Action{{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{
			GenericKey: &routev3.RateLimit_Action_GenericKey{DescriptorKey: "k", DescriptorValue: v}}}}}
	}
	over, ok := rlspb.RateLimitResponse_OVER_LIMIT, rlspb.RateLimitResponse_OK
	minute, hour := rlspb.RateLimitResponse_RateLimit_MINUTE, rlspb.RateLimitResponse_RateLimit_HOUR
	two := []*routev3.RateLimit{gk("a", routev3.RateLimit_UNSPECIFIED), gk("b", routev3.RateLimit_UNSPECIFIED)}
	tests := []struct {
		name      string
		cfg       *ratelimitv3.RateLimit
		peer      *scripted
		wantReply bool
		wantCode  int
		wantHdr   map[string]string // "" value: header must be absent
		wantBody  string
		allowed   bool // FailureModeAllowed
	}{
		{
			name: "over limit: 429, closest limit first, every window listed",
			cfg:  &ratelimitv3.RateLimit{RateLimits: two, EnableXRatelimitHeaders: ratelimitv3.RateLimit_DRAFT_VERSION_03},
			peer: &scripted{resp: &rlspb.RateLimitResponse{OverallCode: over, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
				limitStatus(ok, 1000, 40, hour, 1200), limitStatus(over, 10, 0, minute, 17)}}},
			wantReply: true, wantCode: 429,
			wantHdr: map[string]string{"x-envoy-ratelimited": "true", "x-ratelimit-limit": "10, 1000;w=3600, 10;w=60",
				"x-ratelimit-remaining": "0", "x-ratelimit-reset": "17", "retry-after": ""},
		},
		{
			name: "headers off, x-envoy-ratelimited disabled, custom status, RLS headers and body",
			cfg: &ratelimitv3.RateLimit{RateLimits: two, DisableXEnvoyRatelimitedHeader: true,
				RateLimitedStatus:    &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
				ResponseHeadersToAdd: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-static", Value: "1"}}}},
			peer: &scripted{resp: &rlspb.RateLimitResponse{OverallCode: over, RawBody: []byte(`{"error":{}}`),
				ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "content-type", Value: "application/json"}},
				Statuses:             []*rlspb.RateLimitResponse_DescriptorStatus{limitStatus(over, 1, 0, minute, 5), {Code: ok}}}},
			wantReply: true, wantCode: 503, wantBody: `{"error":{}}`,
			wantHdr: map[string]string{"x-envoy-ratelimited": "", "x-ratelimit-limit": "", "content-type": "application/json", "x-static": "1"},
		},
		{
			name:      "rate_limited_status below 400 means 429",
			cfg:       &ratelimitv3.RateLimit{RateLimits: two, RateLimitedStatus: &typev3.HttpStatus{Code: typev3.StatusCode_OK}},
			peer:      &scripted{resp: &rlspb.RateLimitResponse{OverallCode: over}},
			wantReply: true, wantCode: 429,
		},
		{
			name: "per-descriptor x_ratelimit_option OFF hides the closest limit",
			cfg: &ratelimitv3.RateLimit{RateLimits: []*routev3.RateLimit{gk("a", routev3.RateLimit_UNSPECIFIED), gk("b", routev3.RateLimit_OFF)},
				EnableXRatelimitHeaders: ratelimitv3.RateLimit_DRAFT_VERSION_03},
			peer: &scripted{resp: &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
				limitStatus(ok, 100, 50, minute, 30), limitStatus(ok, 10, 1, minute, 30)}}},
			wantHdr: map[string]string{"x-ratelimit-limit": ""},
		},
		{
			name: "OK: headers go on the upstream response",
			cfg:  &ratelimitv3.RateLimit{RateLimits: two, EnableXRatelimitHeaders: ratelimitv3.RateLimit_DRAFT_VERSION_03},
			peer: &scripted{resp: &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
				limitStatus(ok, 100, 99, minute, 30), {Code: ok}}}},
			wantHdr: map[string]string{"x-ratelimit-limit": "100, 100;w=60", "x-ratelimit-remaining": "99", "x-envoy-ratelimited": ""},
		},
		{
			name: "UNKNOWN overall code lets the request through",
			cfg:  &ratelimitv3.RateLimit{RateLimits: two},
			peer: &scripted{resp: &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_UNKNOWN}},
		},
		{
			name:    "error, fail open",
			cfg:     &ratelimitv3.RateLimit{RateLimits: two},
			peer:    &scripted{err: status.Error(codes.Unavailable, "down")},
			allowed: true,
		},
		{
			name:      "error, fail closed: 500",
			cfg:       &ratelimitv3.RateLimit{RateLimits: two, FailureModeDeny: true},
			peer:      &scripted{err: status.Error(codes.Unavailable, "down")},
			wantReply: true, wantCode: 500,
		},
		{
			name: "timeout, fail closed with status_on_error 503",
			cfg: &ratelimitv3.RateLimit{RateLimits: two, FailureModeDeny: true, Timeout: durationpb.New(100 * time.Millisecond),
				StatusOnError: &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}},
			peer:      &scripted{delay: time.Second, resp: &rlspb.RateLimitResponse{OverallCode: ok}},
			wantReply: true, wantCode: 503,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Domain = "d"
			if tc.cfg.Timeout == nil { // a first call that dials may take longer than Envoy's 20 ms under -race
				tc.cfg.Timeout = durationpb.New(5 * time.Second)
			}
			f, err := New(tc.cfg, dialScripted(t, tc.peer))
			if err != nil {
				t.Fatal(err)
			}
			res := f.DecodeHeaders(context.Background(), &Request{Headers: http.Header{}})
			if !res.Called || len(res.Request.GetDescriptors()) != 2 {
				t.Fatalf("call: %+v", res)
			}
			if res.LocalReply != tc.wantReply || (tc.wantReply && res.Status != tc.wantCode) {
				t.Errorf("local reply %v status %d, want %v %d", res.LocalReply, res.Status, tc.wantReply, tc.wantCode)
			}
			if res.FailureModeAllowed != tc.allowed {
				t.Errorf("FailureModeAllowed %v, want %v", res.FailureModeAllowed, tc.allowed)
			}
			if string(res.Body) != tc.wantBody {
				t.Errorf("body %q, want %q", res.Body, tc.wantBody)
			}
			for k, want := range tc.wantHdr {
				if got := res.Headers.Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestTimeoutBoundsTheCall(t *testing.T) {
	f, err := New(&ratelimitv3.RateLimit{Domain: "d", RateLimits: []*routev3.RateLimit{{Actions: []*routev3.RateLimit_Action{{
		ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{GenericKey: &routev3.RateLimit_Action_GenericKey{DescriptorValue: "v"}}}}}}},
		dialScripted(t, &scripted{delay: 5 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	res := f.DecodeHeaders(context.Background(), &Request{})
	if el := time.Since(begin); el > time.Second || status.Code(res.Err) != codes.DeadlineExceeded || !res.FailureModeAllowed {
		t.Errorf("default 20ms timeout: took %v, err %v, allowed %v", el, res.Err, res.FailureModeAllowed)
	}
}
