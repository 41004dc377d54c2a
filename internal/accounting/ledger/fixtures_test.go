package ledger

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newTestLedger starts a redis-server and a Ledger on it.
func newTestLedger(t testing.TB, opts Options) (*Ledger, *redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = "sg:"
	}
	opts.Logger = quietLog()
	return New(rdb, opts), srv, rdb
}

var testTime = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
