package service_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/config"
	"github.com/swarmgate/swarmgate/ratelimit/rlstest"
	"github.com/swarmgate/swarmgate/ratelimit/service"
	"github.com/swarmgate/swarmgate/xds/translator"
)

// redisProc starts a real redis-server with extra arguments (cluster or
// sentinel mode, which internal/redistest does not offer) on a free port.
func redisProc(t *testing.T, args ...string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	full := append(args, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--logfile", filepath.Join(dir, "log"))
	cmd := exec.Command("redis-server", full...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	waitFor(t, func() bool { return c.Ping(context.Background()).Err() == nil })
	return addr
}

// The embedded service keeps its counters in each Redis topology the
// config can name, through redisconn and our go-redis driver.
func TestRedisTopologies(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, r *config.Redis)
	}{
		{"cluster", func(t *testing.T, r *config.Redis) {
			// A one-node cluster owning every slot: ClusterClient pipelines
			// split by slot exactly as with more nodes.
			addr := redisProc(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			ctx := context.Background()
			if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool {
				info, err := c.ClusterInfo(ctx).Result()
				return err == nil && strings.Contains(info, "cluster_state:ok")
			})
			r.Mode, r.Addrs = "cluster", []string{addr}
		}},
		{"sentinel", func(t *testing.T, r *config.Redis) {
			master := redisProc(t)
			conf := filepath.Join(t.TempDir(), "sentinel.conf")
			host, port, _ := net.SplitHostPort(master)
			if err := os.WriteFile(conf, []byte(fmt.Sprintf("sentinel monitor sgmaster %s %s 1\n", host, port)), 0o600); err != nil {
				t.Fatal(err)
			}
			sentinel := redisProc(t, conf, "--sentinel")
			s := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
			defer s.Close()
			waitFor(t, func() bool {
				a, err := s.GetMasterAddrByName(context.Background(), "sgmaster").Result()
				return err == nil && len(a) == 2 && a[1] == port
			})
			r.Mode, r.Addrs, r.MasterName = "sentinel", []string{sentinel}, "sgmaster"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := rlstest.StartXDS(t)
			cfg := rlstest.Config(t, rlstest.GatewayYAML, "127.0.0.1:1", x.Addr)
			tc.setup(t, &cfg.Redis)
			x.Set(t, translator.RateLimitConfig(cfg))
			run := rlstest.StartService(t, cfg, service.Options{})
			c := rlspb.NewRateLimitServiceClient(rlstest.Dial(t, run.Addr))
			rlstest.AvoidWindowEdge(t, 3*time.Second)
			var codes []rlspb.RateLimitResponse_Code
			for i := 0; i < 4; i++ { // tenant small: 3 RPM; rpd in another slot
				r, err := call(t, c, desc(nil, "tenant", "small", "limit", "rpm"), desc(nil, "tenant", "small", "limit", "rpd"))
				if err != nil {
					t.Fatal(err)
				}
				codes = append(codes, r.GetOverallCode())
			}
			want := []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT}
			if fmt.Sprint(codes) != fmt.Sprint(want) {
				t.Errorf("answers %v, want %v", codes, want)
			}
		})
	}
}
