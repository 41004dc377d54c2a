package keylimit_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/keypool"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/ratelimit/keylimit"
	"github.com/swarmgate/swarmgate/ratelimit/rlstest"
	"github.com/swarmgate/swarmgate/ratelimit/service"
	"github.com/swarmgate/swarmgate/xds/translator"
)

// The limiter is what keypool consumes.
var _ keypool.KeyLimiter = (*keylimit.Limiter)(nil)

func TestMain(m *testing.M) {
	service.RouteLibraryLogs(slog.New(slog.DiscardHandler))
	os.Exit(m.Run())
}

type env struct {
	cfg *config.Config
	svc *rlstest.Running
}

func start(t *testing.T) *env {
	t.Helper()
	rs := redistest.Start(t)
	x := rlstest.StartXDS(t)
	cfg := rlstest.Config(t, rlstest.GatewayYAML, rs.Addr, x.Addr)
	x.Set(t, translator.RateLimitConfig(cfg))
	return &env{cfg: cfg, svc: rlstest.StartService(t, cfg, service.Options{})}
}

func (e *env) limiter(t *testing.T, timeout time.Duration) *keylimit.Limiter {
	return keylimit.New(rlstest.Dial(t, e.svc.Addr), e.cfg, keylimit.Options{Timeout: timeout})
}

// Three ext_proc replicas attempting key k1 (provider limit 60 RPM) at once:
// exactly 60 attempts are allowed in the window, the rest are told when the
// window resets.
func TestReplicasKeepKeyUnderProviderRPM(t *testing.T) {
	e := start(t)
	ls := []*keylimit.Limiter{e.limiter(t, 5*time.Second), e.limiter(t, 5*time.Second), e.limiter(t, 5*time.Second)}
	rlstest.AvoidWindowEdge(t, 10*time.Second)
	window := time.Now().Unix() / 60
	var allowed, refused atomic.Int64
	var badRetry atomic.Int64
	var wg sync.WaitGroup
	for _, l := range ls {
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					ok, retry, err := l.Allow(context.Background(), "k1", 1)
					switch {
					case err != nil:
						t.Errorf("Allow: %v", err)
					case ok:
						allowed.Add(1)
					default:
						refused.Add(1)
						if retry <= 0 || retry > time.Minute {
							badRetry.Add(1)
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	if time.Now().Unix()/60 != window {
		t.Fatal("the attempts crossed a window boundary")
	}
	if allowed.Load() != 60 || refused.Load() != 60 {
		t.Errorf("allowed %d, refused %d of 120 attempts; want 60 and 60", allowed.Load(), refused.Load())
	}
	if badRetry.Load() != 0 {
		t.Errorf("%d refusals had a retryAfter outside (0, 1m]", badRetry.Load())
	}
}

func TestAllow(t *testing.T) {
	e := start(t)
	l := e.limiter(t, 5*time.Second)
	rlstest.AvoidWindowEdge(t, 3*time.Second)
	ctx := context.Background()
	steps := []struct {
		name   string
		key    string
		tokens int
		want   bool
	}{
		{"k1 3000 of 5000 TPM", "k1", 3000, true},
		{"k1 another 3000 is over TPM", "k1", 3000, false},
		{"k1 zero tokens: RPM only", "k1", 0, true},
		{"k2 has no limits: no call", "k2", 1 << 30, true},
		{"unknown key: no call", "nope", 1, true},
	}
	for _, s := range steps {
		ok, retry, err := l.Allow(ctx, s.key, s.tokens)
		if err != nil || ok != s.want {
			t.Errorf("%s: ok=%v err=%v, want %v", s.name, ok, err, s.want)
		}
		if !ok && retry <= 0 {
			t.Errorf("%s: refused without retryAfter", s.name)
		}
	}
}

// Service unreachable: an error within the timeout, ok per failure mode.
func TestFailureModes(t *testing.T) {
	e := start(t)
	if err := e.svc.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode config.FailureMode
		want bool
	}{{config.FailOpen, true}, {config.FailClosed, false}} {
		t.Run(string(tc.mode), func(t *testing.T) {
			cfg := *e.cfg
			cfg.FailureModes.RateLimit = tc.mode
			l := keylimit.New(rlstest.Dial(t, e.svc.Addr), &cfg, keylimit.Options{Timeout: 50 * time.Millisecond})
			begin := time.Now()
			ok, _, err := l.Allow(context.Background(), "k1", 10)
			if err == nil || ok != tc.want {
				t.Errorf("ok=%v err=%v, want ok=%v and an error", ok, err, tc.want)
			}
			if el := time.Since(begin); el > time.Second {
				t.Errorf("answer took %v with a 50ms timeout", el)
			}
			// keys without limits never need the service
			if ok, _, err := l.Allow(context.Background(), "k2", 10); !ok || err != nil {
				t.Errorf("unlimited key: ok=%v err=%v", ok, err)
			}
		})
	}
}

func TestUpdate(t *testing.T) {
	e := start(t)
	l := e.limiter(t, 5*time.Second)
	cfg := *e.cfg
	cfg.Backends = nil // no key has limits any more
	l.Update(&cfg)
	for i := 0; i < 100; i++ { // k1 would be refused after 60
		if ok, _, err := l.Allow(context.Background(), "k1", 1); !ok || err != nil {
			t.Fatalf("after Update without limits: ok=%v err=%v", ok, err)
		}
	}
}

func BenchmarkAllow(b *testing.B) {
	rs := redistest.Start(b)
	x := rlstest.StartXDS(b)
	cfg := rlstest.Config(b, rlstest.GatewayYAML, rs.Addr, x.Addr)
	cfg.Backends[0].Keys[0].RPM = 1 << 30
	cfg.Backends[0].Keys[0].TPM = 1 << 30
	x.Set(b, translator.RateLimitConfig(cfg))
	svc := rlstest.StartService(b, cfg, service.Options{})
	l := keylimit.New(rlstest.Dial(b, svc.Addr), cfg, keylimit.Options{Timeout: time.Second})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if ok, _, err := l.Allow(ctx, "k1", 100); !ok || err != nil {
			b.Fatalf("ok=%v err=%v", ok, err)
		}
	}
}

// okServer answers every check OK with one prebuilt response, so
// BenchmarkAllowGRPCOnly measures the limiter and gRPC alone.
type okServer struct {
	rlspb.UnimplementedRateLimitServiceServer
	resp *rlspb.RateLimitResponse
}

func (s *okServer) ShouldRateLimit(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return s.resp, nil
}

func BenchmarkAllowGRPCOnly(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(srv, &okServer{resp: &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	cfg := rlstest.Config(b, rlstest.GatewayYAML, "127.0.0.1:1", "127.0.0.1:1")
	l := keylimit.New(rlstest.Dial(b, ln.Addr().String()), cfg, keylimit.Options{Timeout: time.Second})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if ok, _, err := l.Allow(ctx, "k1", 100); !ok || err != nil {
			b.Fatalf("ok=%v err=%v", ok, err)
		}
	}
}
