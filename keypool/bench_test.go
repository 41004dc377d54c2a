package keypool

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func benchPools(b *testing.B, keys int) *Pools {
	ks := make([]key, keys)
	for i := range ks {
		ks[i] = key{id: "k" + strconv.Itoa(i), weight: 1 + i%3, rpm: 1 << 30}
	}
	cfg := testConfig(b, "", map[string][]key{"b": ks})
	return newPools(b, cfg, Options{})
}

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

// Contention check used by the docs: 1,000 goroutines each doing picks
// with a simulated upstream latency, reporting throughput.
func BenchmarkPickWithLatency(b *testing.B) {
	p := benchPools(b, 16)
	ctx := context.Background()
	b.SetParallelism(max(1000/runtime.GOMAXPROCS(0), 1))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := p.Pick(ctx, "b", PickRequest{Attempt: 1})
			if err != nil {
				b.Fatal(err)
			}
			time.Sleep(100 * time.Microsecond)
			l.Done(status(200))
		}
	})
}
