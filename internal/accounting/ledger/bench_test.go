package ledger

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

func reportLatency(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkRecord is one direct write (one EVALSHA round trip) against a
// local redis-server, sequentially.
func BenchmarkRecord(b *testing.B) {
	l, _, _ := newTestLedger(b, Options{})
	entries := mixedEntries(1000, 9)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		e := entries[i%len(entries)]
		e.RequestID = fmt.Sprint("b", i)
		i++
		start := time.Now()
		if err := l.Record(ctx, e); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	reportLatency(b, lat)
}

// BenchmarkReplayPipelined writes batches of 64 entries (ReplayBatch) in one pipeline,
// the replay path; entries/s is the throughput with pipelining.
func BenchmarkReplayPipelined(b *testing.B) {
	l, _, _ := newTestLedger(b, Options{})
	src := mixedEntries(64, 10)
	ctx := context.Background()
	b.ReportAllocs()
	n := 0
	start := time.Now()
	for b.Loop() {
		batch := slices.Clone(src)
		for j := range batch {
			batch[j].RequestID = fmt.Sprint("p", n)
			n++
		}
		if _, err := l.writeBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "entries/s")
}
