package service_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/ratelimit/rlstest"
	"github.com/swarmgate/swarmgate/ratelimit/service"
	"github.com/swarmgate/swarmgate/xds/translator"
)

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
			addrs := redistest.Cluster(t, 1)
			r.Mode, r.Addrs = "cluster", addrs
		}},
		{"sentinel", func(t *testing.T, r *config.Redis) {
			master := redistest.Start(t).Addr
			conf := filepath.Join(t.TempDir(), "sentinel.conf")
			host, port, _ := net.SplitHostPort(master)
			if err := os.WriteFile(conf, []byte(fmt.Sprintf("sentinel monitor sgmaster %s %s 1\n", host, port)), 0o600); err != nil {
				t.Fatal(err)
			}
			sentinel := redistest.StartWith(t, conf, "--sentinel").Addr
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
