package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/porttest"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

// TestRateLimitUnreadyWithoutConfig: a rate-limit replica whose control
// plane has not answered answers every call Unavailable, so /readyz keeps
// it out of rotation (503, naming why) instead of reporting it ready as
// soon as it listens.
func TestRateLimitUnreadyWithoutConfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs := redistest.Start(t)
	adminL := listen(t)
	// listen.xds names a port nobody serves: no config ever arrives.
	y := fmt.Sprintf(gatewayYAML, porttest.Addr(t), porttest.Addr(t), porttest.Addr(t), adminL.Addr(), rs.Addr, "127.0.0.1:9",
		config.HashKey("sk-team"), "")
	cfg, err := config.Parse([]byte(y), "rls.yaml", config.Options{LookupEnv: lookup})
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	g, err := New(Options{Roles: Roles{RateLimit: true, Admin: true}, Initial: cfg, Ready: ready,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Listeners: Listeners{Admin: adminL}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	defer func() { stop(); <-done }()
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatal("rate-limit role not listening")
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+adminL.Addr().String()+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "ratelimit_config") {
		t.Fatalf("/readyz %d %s: want 503 naming ratelimit_config", resp.StatusCode, b)
	}
}
