package keypool

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/redistest"
)

func benchConfig(b *testing.B, keys int) *config.Config {
	ks := make([]key, keys)
	for i := range ks {
		ks[i] = key{id: "k" + strconv.Itoa(i), weight: 1 + i%3, rpm: 1 << 30}
	}
	return testConfig(b, "", map[string][]key{"b": ks})
}

func benchPools(b *testing.B, keys int) *Pools { return newPools(b, benchConfig(b, keys), Options{}) }

// BenchmarkPick measures Pick+Done of one attempt at 1 and ~1,000
// concurrent goroutines (SetParallelism(n/GOMAXPROCS)).
func BenchmarkPick(b *testing.B) {
	for _, conc := range []int{1, 1000} {
		for _, keys := range []int{8, 64} {
			b.Run("goroutines="+strconv.Itoa(conc)+"/keys="+strconv.Itoa(keys), func(b *testing.B) {
				p := benchPools(b, keys)
				ctx := context.Background()
				ok := status(200)
				var seq atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(max(conc/runtime.GOMAXPROCS(0), 1))
				if conc == 1 {
					b.SetParallelism(1)
				}
				b.RunParallel(func(pb *testing.PB) {
					ids := make([]string, 256)
					for i := range ids {
						ids[i] = "req-" + strconv.FormatInt(seq.Add(1), 10)
					}
					i := 0
					for pb.Next() {
						l, err := p.Pick(ctx, "b", PickRequest{RequestID: ids[i&255], Attempt: 1, EstTokens: 100})
						if err != nil {
							b.Fatal(err)
						}
						l.Done(ok)
						i++
					}
				})
			})
		}
	}
}

func BenchmarkPickSticky(b *testing.B) {
	p := benchPools(b, 8)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l, _ := p.Pick(ctx, "b", PickRequest{Sticky: "session-42", Attempt: 1})
		l.Done(status(200))
	}
}

// BenchmarkReport is the breaker update of an outcome seen without the
// lease (Report path), alternating success and 429 below the threshold.
func BenchmarkReport(b *testing.B) {
	p := benchPools(b, 8)
	ctx := context.Background()
	outs := []Outcome{status(200), status(429), status(200), ParseOutcome(200, func(string) string { return "" })}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = p.Report(ctx, "b", "k"+strconv.Itoa(i&7), "req", outs[i&3])
	}
}

func BenchmarkParseOutcome(b *testing.B) {
	h := map[string]string{"x-ratelimit-remaining-requests": "59", "x-ratelimit-remaining-tokens": "149984",
		"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}
	get := func(n string) string { return h[n] }
	b.ReportAllocs()
	for b.Loop() {
		_ = ParseOutcome(200, get)
	}
}

// BenchmarkPickLatency1000Streams models 1,000 concurrent streams: each
// goroutine picks, holds the lease for 1ms or 20ms of "upstream" time, releases,
// and records how long Pick itself took (p50/p99/p99.9). "shared" is one
// pool for all streams, the real case; "private" gives every goroutine its
// own pool, so no lock is ever contended: the difference between the two is
// what the mutex costs, the rest is the scheduler of an oversubscribed box.
func BenchmarkPickLatency1000Streams(b *testing.B) {
	const streams = 1000
	for _, c := range []struct {
		mode  string
		think time.Duration
	}{{"shared", time.Millisecond}, {"private", time.Millisecond}, {"shared", 20 * time.Millisecond}, {"private", 20 * time.Millisecond}} {
		mode := c.mode
		b.Run(mode+"/upstream="+c.think.String(), func(b *testing.B) {
			cfg := benchConfig(b, 16)
			pools := make([]*Pools, streams)
			for i := range pools {
				if mode == "shared" && i > 0 {
					pools[i] = pools[0]
				} else {
					pools[i] = newPools(b, cfg, Options{})
				}
			}
			ctx := context.Background()
			var mu sync.Mutex
			var all []time.Duration
			var next atomic.Int64
			b.ResetTimer()
			b.SetParallelism(max(streams/runtime.GOMAXPROCS(0), 1))
			b.RunParallel(func(pb *testing.PB) {
				p := pools[int(next.Add(1)-1)%streams]
				var mine []time.Duration
				for pb.Next() {
					start := time.Now()
					l, err := p.Pick(ctx, "b", PickRequest{Attempt: 1, EstTokens: 100})
					mine = append(mine, time.Since(start))
					if err != nil {
						b.Error(err)
						return
					}
					time.Sleep(c.think)
					l.Done(status(200))
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			})
			if len(all) == 0 {
				return
			}
			slices.Sort(all)
			q := func(f float64) float64 { return float64(all[int(f*float64(len(all)-1))].Nanoseconds()) }
			b.ReportMetric(q(0.5), "p50-pick-ns")
			b.ReportMetric(q(0.99), "p99-pick-ns")
			b.ReportMetric(q(0.999), "p999-pick-ns")
		})
	}
}

// BenchmarkPickKeyPace is Pick+Done with admission.pace on: each pick
// takes a slot of its key's pace in a real redis-server (one EVALSHA),
// keys paced far above the loop's rate so no pick waits. Compare with
// BenchmarkPick/goroutines=1/keys=8 (no pace: no Redis call).
func BenchmarkPickKeyPace(b *testing.B) {
	srv := redistest.Start(b)
	ks := make([]key, 8)
	for i := range ks {
		ks[i] = key{id: "k" + strconv.Itoa(i), weight: 1 + i%3, rpm: 1 << 30}
	}
	cfg := testConfig(b, "admission: {max_wait: 2s, pace: true}\n", map[string][]key{"b": ks})
	p := newPools(b, cfg, Options{Redis: srv.Client(), ReplicaID: "bench"})
	ctx := context.Background()
	ok := status(200)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l, err := p.Pick(ctx, "b", PickRequest{RequestID: "req-" + strconv.Itoa(i&255), Attempt: 1, EstTokens: 100})
		if err != nil {
			b.Fatal(err)
		}
		l.Done(ok)
	}
}
