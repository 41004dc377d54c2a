package keypool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// TestConcurrentUse hammers one Pools from many goroutines (picks, Done and
// Report with mixed outcomes, retries, reloads, snapshots, health reads)
// with Redis sync on, under -race; afterwards nothing is left in flight.
func TestConcurrentUse(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(t, breakerYAML(50*time.Millisecond, 200*time.Millisecond, 50*time.Millisecond, 0.2, true)+
		"redis: {read_timeout: 200ms}\nadmission: {pace: false}\n",
		map[string][]key{"b": {{id: "a", weight: 3, max: 50}, {id: "b"}, {id: "c"}}, "d": {{id: "x"}}})
	ps := replicas(t, srv, cfg, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := ps[g%2]
			for i := range 150 {
				req := PickRequest{RequestID: fmt.Sprint(g, "-", i), Attempt: 1, Sticky: map[bool]string{true: fmt.Sprint("s", g)}[g%3 == 0]}
				for req.Attempt <= 3 {
					l, err := p.Pick(ctx, "b", req)
					if err != nil {
						if !errors.Is(err, ErrNoKey) {
							t.Error(err)
						}
						break
					}
					var o Outcome
					switch (g + i + req.Attempt) % 7 {
					case 0:
						o = status(429)
					case 1:
						o = Outcome{Reset: true}
					case 2:
						o = Outcome{Status: 200, RemainingRequests: 0, RemainingTokens: -1, ResetRequests: 10 * time.Millisecond}
					default:
						o = status(200)
					}
					if i%2 == 0 {
						l.Done(o)
					} else {
						_ = p.Report(ctx, "b", l.KeyID, req.RequestID, o)
					}
					if !o.Failed() {
						break
					}
					req.Attempt++
				}
			}
		}()
	}
	stop := make(chan struct{})
	var side sync.WaitGroup
	side.Add(1)
	go func() {
		defer side.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ps[0].SetConfig(cfg)
			_ = ps[1].Snapshot()
			_ = ps[0].BackendHealth()
			_, _ = ps[1].Available([]string{"b", "d"})
			time.Sleep(time.Millisecond)
		}
	}()
	wg.Wait()
	close(stop)
	side.Wait()
	for i, p := range ps {
		for _, s := range p.Snapshot() {
			if s.InFlight != 0 {
				t.Errorf("replica %d key %s: %d in flight after all leases were released", i, s.KeyID, s.InFlight)
			}
		}
	}
}

func histCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func TestSubscriptionResumesAfterRestart(t *testing.T) {
	srv := redistest.Start(t)
	ps := replicas(t, srv, syncConfig(t, time.Hour, ""), 2) // poll practically off: only pub/sub can deliver
	subs := func(n int64) func() bool {
		return func() bool {
			m, _ := srv.Client().PubSubNumSub(t.Context(), "sg:keypool:events").Result()
			return m["sg:keypool:events"] == n
		}
	}
	waitFor(t, 5*time.Second, "subscribers", subs(2))
	srv.Stop()
	srv.Restart()
	waitFor(t, 10*time.Second, "subscribers back", subs(2))
	before := histCount(t, ps[1].metrics.lag.WithLabelValues("pubsub"))
	// The writer may still believe Redis is down; its first write tells.
	trip(t, ps[0], "a")
	lag := waitFor(t, 5*time.Second, "trip over resumed pub/sub", func() bool { return stateOf(t, ps[1], "a").State == "open" })
	// The lag is observed just after the state changes: wait for it too.
	waitFor(t, time.Second, "pub/sub delivery counted", func() bool {
		return histCount(t, ps[1].metrics.lag.WithLabelValues("pubsub")) == before+1
	})
	t.Logf("trip delivered over the resumed subscription in %s", lag)
}
