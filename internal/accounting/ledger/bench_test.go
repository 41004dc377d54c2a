package ledger

import (
	"context"
	"fmt"
	"slices"
	"strconv"
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

// BenchmarkRecordLabels is the direct write of an entry with no virtual
// key or label (the tenant's counters only), a key and no label, and a key
// with 3 labels (each adds a day, month and all-time hash and a ranking to
// the script), against a local redis-server.
func BenchmarkRecordLabels(b *testing.B) {
	for _, bc := range []struct {
		name   string
		key    string
		labels map[string]string
	}{
		{"tenant-only", "", nil},
		{"key-0-labels", "sk_0123456789abcdef", nil},
		{"key-3-labels", "sk_0123456789abcdef", map[string]string{"run": "nightly-42", "team": "search", "stage": "eval"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, _, _ := newTestLedger(b, Options{})
			e := mixedEntries(1, 11)[0]
			e.VirtualKeyID, e.Labels = bc.key, bc.labels
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				e.RequestID = "b" + strconv.Itoa(i)
				i++
				if err := l.Record(ctx, e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScriptArgs is the client side of one write, without Redis: the
// keys and arguments built for the script, 0 or 3 labels.
func BenchmarkScriptArgs(b *testing.B) {
	for _, n := range []int{0, 3} {
		b.Run(strconv.Itoa(n)+"-labels", func(b *testing.B) {
			e := mixedEntries(1, 12)[0]
			e.VirtualKeyID, e.Labels = "sk_0123456789abcdef", nil
			if n == 3 {
				e.Labels = map[string]string{"run": "nightly-42", "team": "search", "stage": "eval"}
			}
			o := Options{KeyPrefix: "sg:", DedupeTTL: time.Hour, Retention: time.Hour}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = scriptArgs(&e, o)
			}
		})
	}
}
