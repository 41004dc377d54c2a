package service_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/ratelimit/rlstest"
	"github.com/swarmgate/swarmgate/ratelimit/service"
	"github.com/swarmgate/swarmgate/xds/translator"
)

func desc(hits *uint64, kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	if hits != nil {
		d.HitsAddend = wrapperspb.UInt64(*hits)
	}
	return d
}

func u64(n uint64) *uint64 { return &n }

type env struct {
	cfg   *config.Config
	redis *redistest.Server
	xds   *rlstest.XDS
	svc   *rlstest.Running
	rls   rlspb.RateLimitServiceClient
}

func start(t testing.TB, opts service.Options) *env {
	t.Helper()
	return startYAML(t, rlstest.GatewayYAML, opts)
}

// startYAML runs Redis, xDS and the service with the gateway config yaml.
func startYAML(t testing.TB, yaml string, opts service.Options) *env {
	t.Helper()
	e := &env{redis: redistest.Start(t), xds: rlstest.StartXDS(t)}
	cfg := rlstest.Config(t, yaml, e.redis.Addr, e.xds.Addr)
	e.cfg = cfg
	e.xds.Set(t, translator.RateLimitConfig(cfg))
	e.svc = rlstest.StartService(t, cfg, opts)
	rlstest.AvoidWindowEdge(t, 3*time.Second)
	e.rls = rlspb.NewRateLimitServiceClient(rlstest.Dial(t, e.svc.Addr))
	return e
}

func call(t *testing.T, c rlspb.RateLimitServiceClient, ds ...*rlcommon.RateLimitDescriptor) (*rlspb.RateLimitResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "swarmgate", Descriptors: ds})
}

func TestShouldRateLimitDescriptors(t *testing.T) {
	e := start(t, service.Options{})
	tests := []struct {
		name  string
		descs []*rlcommon.RateLimitDescriptor
		calls int
		want  []rlspb.RateLimitResponse_Code // per call
	}{
		{"tenant rpm: 3 then over", []*rlcommon.RateLimitDescriptor{desc(nil, "tenant", "small", "limit", "rpm")}, 4,
			[]rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT}},
		{"unknown tenant is unlimited", []*rlcommon.RateLimitDescriptor{desc(nil, "tenant", "nobody", "limit", "rpm")}, 2,
			[]rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK}},
		{"tokens by hits_addend: 6000+6000 > 10000 TPM", []*rlcommon.RateLimitDescriptor{desc(u64(6000), "tenant", "t1", "limit", "tpm")}, 2,
			[]rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT}},
		{"hits_addend 0 checks without charging", []*rlcommon.RateLimitDescriptor{desc(u64(0), "key", "k1", "limit", "tpm")}, 3,
			[]rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < tc.calls; i++ {
				resp, err := call(t, e.rls, tc.descs...)
				if err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
				if got := resp.GetOverallCode(); got != tc.want[i] {
					t.Errorf("call %d: %v, want %v (%v)", i+1, got, tc.want[i], resp)
				}
			}
		})
	}
}

// A request refused by one descriptor must not consume the other windows it
// names (Options.ChargeRefused false): otherwise refused retries of a swarm
// burn its daily quota.
func TestRefusedRequestDoesNotChargeOtherLimits(t *testing.T) {
	for _, tc := range []struct {
		name          string
		chargeRefused bool
		wantRPDLeft   uint32
	}{
		{"default: refused calls keep the daily quota", false, 2},
		{"ChargeRefused: library default burns it", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, service.Options{ChargeRefused: tc.chargeRefused})
			rpm := desc(nil, "tenant", "small", "limit", "rpm")
			rpd := desc(nil, "tenant", "small", "limit", "rpd")
			for i := 0; i < 5; i++ { // 3 admitted, then refused by rpm
				if _, err := call(t, e.rls, rpm, rpd); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := call(t, e.rls, desc(u64(0), "tenant", "small", "limit", "rpd"))
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.GetStatuses()[0].GetLimitRemaining(); got != tc.wantRPDLeft {
				t.Errorf("rpd remaining after 3 admitted + 2 refused = %d, want %d", got, tc.wantRPDLeft)
			}
		})
	}
}

// A request refused for its tokens leaves its window as it was: the
// library charged the refusing descriptor its own hits_addend, and a
// refused 12,000-token estimate against 10,000 TPM left the window full,
// refusing every request after it until the minute ended.
func TestRefusedTokensLeaveTheWindow(t *testing.T) {
	e := start(t, service.Options{})
	rpm := func() *rlcommon.RateLimitDescriptor { return desc(nil, "tenant", "t1", "limit", "rpm") }
	tpm := func(n uint64) *rlcommon.RateLimitDescriptor { return desc(u64(n), "tenant", "t1", "limit", "tpm") }
	for i, tc := range []struct {
		tokens uint64
		want   rlspb.RateLimitResponse_Code
	}{
		{12000, rlspb.RateLimitResponse_OVER_LIMIT}, // never fits
		{100, rlspb.RateLimitResponse_OK},
		{9901, rlspb.RateLimitResponse_OVER_LIMIT}, // one more than is left
		{9900, rlspb.RateLimitResponse_OK},         // exactly what is left
	} {
		resp, err := call(t, e.rls, rpm(), tpm(tc.tokens))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetOverallCode(); got != tc.want {
			t.Fatalf("call %d (%d tokens): %v, want %v (%v)", i+1, tc.tokens, got, tc.want, resp)
		}
	}
}

func TestConfigUpdatesOverXDS(t *testing.T) {
	e := start(t, service.Options{})
	d := desc(nil, "tenant", "x", "limit", "rpm")
	if r, _ := call(t, e.rls, d); r.GetOverallCode() != rlspb.RateLimitResponse_OK || r.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Fatalf("before update: %v", r)
	}
	one := &rlsconf.RateLimitConfig{Name: "swarmgate", Domain: "swarmgate", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: "tenant", Value: "x", Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: "limit", Value: "rpm", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 1}}}}}}
	e.xds.Set(t, one)
	waitFor(t, func() bool {
		r, err := call(t, e.rls, desc(u64(0), "tenant", "x", "limit", "rpm"))
		return err == nil && r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 1
	})

	// An invalid config (duplicate descriptor) is NACKed; the last good one stays.
	bad := &rlsconf.RateLimitConfig{Name: "swarmgate", Domain: "swarmgate", Descriptors: []*rlsconf.RateLimitDescriptor{
		one.Descriptors[0], one.Descriptors[0]}}
	e.xds.Set(t, bad)
	time.Sleep(300 * time.Millisecond) // nothing observable to wait for: the point is that nothing changes
	r, err := call(t, e.rls, desc(u64(0), "tenant", "x", "limit", "rpm"))
	if err != nil || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 1 {
		t.Errorf("after a rejected config: %v, %v; want the last good limit 1", r, err)
	}
}

func TestNotReadyUntilConfig(t *testing.T) {
	rs := redistest.Start(t)
	x := rlstest.StartXDS(t) // no snapshot yet
	cfg := rlstest.Config(t, rlstest.GatewayYAML, rs.Addr, x.Addr)
	svc, err := service.New(cfg, service.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	<-svc.Ready()
	cc := rlstest.Dial(t, svc.Addr().String())
	_, err = call(t, rlspb.NewRateLimitServiceClient(cc), desc(nil, "tenant", "t1", "limit", "rpm"))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("before config: err %v, want Unavailable", err)
	}
	h, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{Service: service.HealthService})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health before config: %v %v", h, err)
	}
	x.Set(t, translator.RateLimitConfig(cfg))
	select {
	case <-svc.ConfigLoaded():
	case <-time.After(10 * time.Second):
		t.Fatal("config not loaded")
	}
	h, err = healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{Service: service.HealthService})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health after config: %v %v", h, err)
	}
}

// Two services one after the other in one process, same Redis: both start
// and stop cleanly and the counters live in Redis, not in the process.
func TestStartStopTwice(t *testing.T) {
	rs := redistest.Start(t)
	x := rlstest.StartXDS(t)
	d := desc(nil, "tenant", "small", "limit", "rpm")
	rlstest.AvoidWindowEdge(t, 5*time.Second)
	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		cfg := rlstest.Config(t, rlstest.GatewayYAML, rs.Addr, x.Addr)
		x.Set(t, translator.RateLimitConfig(cfg))
		run := rlstest.StartService(t, cfg, service.Options{})
		c := rlspb.NewRateLimitServiceClient(rlstest.Dial(t, run.Addr))
		var last rlspb.RateLimitResponse_Code
		for j := 0; j < 2; j++ { // instance 1: calls 1,2 OK; instance 2: calls 3 OK, 4 over
			r, err := call(t, c, d)
			if err != nil {
				t.Fatalf("instance %d: %v", i+1, err)
			}
			last = r.GetOverallCode()
		}
		if last != want {
			t.Errorf("instance %d: last answer %v, want %v", i+1, last, want)
		}
		if err := run.Stop(); err != nil {
			t.Fatalf("instance %d stop: %v", i+1, err)
		}
		if _, err := call(t, c, d); err == nil {
			t.Errorf("instance %d still answers after Stop", i+1)
		}
	}
}

func TestRunFailsOnBusyPort(t *testing.T) {
	rs := redistest.Start(t)
	x := rlstest.StartXDS(t)
	cfg := rlstest.Config(t, rlstest.GatewayYAML, rs.Addr, x.Addr)
	x.Set(t, translator.RateLimitConfig(cfg))
	first := rlstest.StartService(t, cfg, service.Options{})
	cfg2 := rlstest.Config(t, rlstest.GatewayYAML, rs.Addr, x.Addr)
	cfg2.Listen.RateLimit = first.Addr
	svc, err := service.New(cfg2, service.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Run on a busy port: %v, want a listen error", err)
	}
}

// Redis killed: calls fail fast with Unavailable (bounded by the Redis
// timeouts, no hang); Redis back: answers resume without a restart.
func TestRedisDownAndBack(t *testing.T) {
	e := start(t, service.Options{})
	d := desc(nil, "tenant", "t1", "limit", "rpm")
	if _, err := call(t, e.rls, d); err != nil {
		t.Fatal(err)
	}
	e.redis.Stop()
	for i := 0; i < 3; i++ {
		begin := time.Now()
		_, err := call(t, e.rls, d)
		t.Logf("Redis down: call %d answered in %v: %v", i+1, time.Since(begin), err)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("Redis down: err %v, want Unavailable", err)
		}
		if el := time.Since(begin); el > 2*time.Second {
			t.Errorf("Redis down: answer took %v", el)
		}
	}
	begin := time.Now()
	e.redis.Restart()
	t.Logf("redis restarted in %v", time.Since(begin))
	waitFor(t, func() bool { _, err := call(t, e.rls, d); return err == nil })
	t.Logf("answers resumed %v after the restart began", time.Since(begin))
}

func TestEnvironmentCheck(t *testing.T) {
	rs := redistest.Start(t)
	x := rlstest.StartXDS(t)
	cfg := rlstest.Config(t, rlstest.GatewayYAML, rs.Addr, x.Addr)
	for _, tc := range []struct{ k, v string }{
		{"GRPC_PORT", "not-a-number"},
		{"REDIS_TLS", "true"}, // with REDIS_TLS_CACERT naming a missing file below
	} {
		t.Run(tc.k, func(t *testing.T) {
			t.Setenv(tc.k, tc.v)
			t.Setenv("REDIS_TLS_CACERT", t.TempDir()+"/missing.pem")
			if _, err := service.New(cfg, service.Options{}); err == nil {
				t.Errorf("New with %s=%s: want an error (the library would panic on its next config update)", tc.k, tc.v)
			}
		})
	}
	if _, err := service.New(cfg, service.Options{}); err != nil {
		t.Errorf("New in a clean environment: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal(errors.New("condition not met within 10s"))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestMain(m *testing.M) {
	service.RouteLibraryLogs(slog.New(slog.DiscardHandler))
	os.Exit(m.Run())
}

// Redis down when the service starts: it still starts (the library's own
// driver would panic on its startup PING) and answers once Redis is up.
func TestStartsWithRedisDown(t *testing.T) {
	rs := redistest.Start(t)
	rs.Stop()
	x := rlstest.StartXDS(t)
	cfg := rlstest.Config(t, rlstest.GatewayYAML, rs.Addr, x.Addr)
	x.Set(t, translator.RateLimitConfig(cfg))
	run := rlstest.StartService(t, cfg, service.Options{})
	c := rlspb.NewRateLimitServiceClient(rlstest.Dial(t, run.Addr))
	d := desc(nil, "tenant", "t1", "limit", "rpm")
	if _, err := call(t, c, d); status.Code(err) != codes.Unavailable {
		t.Fatalf("Redis down: %v, want Unavailable", err)
	}
	rs.Restart()
	waitFor(t, func() bool { _, err := call(t, c, d); return err == nil })
}

// Config swaps while calls are in flight: every call is answered and the
// race detector (CI runs -race) sees the library's config swap serialized
// with ShouldRateLimit.
func TestConfigUpdatesUnderLoad(t *testing.T) {
	e := start(t, service.Options{})
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var calls, failed atomic.Int64
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := call(t, e.rls, desc(u64(0), "tenant", "x", "limit", "rpm")); err != nil {
					failed.Add(1)
				}
				calls.Add(1)
			}
		}()
	}
	for n := uint32(1); n <= 10; n++ {
		e.xds.Set(t, &rlsconf.RateLimitConfig{Name: "swarmgate", Domain: "swarmgate", Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: "tenant", Value: "x", Descriptors: []*rlsconf.RateLimitDescriptor{{
				Key: "limit", Value: "rpm", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: n}}}}}})
		waitFor(t, func() bool {
			r, err := call(t, e.rls, desc(u64(0), "tenant", "x", "limit", "rpm"))
			return err == nil && r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == n
		})
	}
	stop()
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d of %d calls failed during config swaps", failed.Load(), calls.Load())
	}
}
