package usage

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"

	"github.com/swarmgate/swarmgate/internal/cpuclock"
)

// benchStream is a long chat stream: the include_usage fixture's content
// chunks repeated, then its usage chunk and [DONE].
func benchStream(tb testing.TB, events int) ([]byte, [][]byte) {
	blocks := refBlocks(readFixture(tb, "openai_chat_include_usage.sse"))
	content := blocks[1 : len(blocks)-3]
	var s []byte
	var chunks [][]byte
	for i := 0; i < events; i++ {
		b := content[i%len(content)]
		s = append(s, b...)
	}
	for _, b := range blocks[len(blocks)-2:] {
		s = append(s, b...)
	}
	// Chunks as Envoy delivers them: arbitrary cuts, here every 173 bytes.
	for i := 0; i < len(s); i += 173 {
		chunks = append(chunks, s[i:min(i+173, len(s))])
	}
	return s, chunks
}

// benchChunks runs one whole stream, given as chunks, per iteration and
// reports MB/s of wall and CPU time and ns per chunk.
func benchChunks(b *testing.B, size int, chunks [][]byte, stream func(chunks [][]byte)) {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	start := cpuclock.Start()
	for b.Loop() {
		stream(chunks)
	}
	cpuclock.ReportMBps(b, start, size)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(chunks)), "ns/chunk")
}

func parseAll(p *StreamParser) func([][]byte) {
	return func(chunks [][]byte) {
		p.Reset()
		for _, c := range chunks {
			p.Write(c)
		}
	}
}

func filterAll(f *StreamFilter) func([][]byte) {
	return func(chunks [][]byte) {
		f.Reset()
		for _, c := range chunks {
			f.Write(c)
		}
		f.Flush()
	}
}

func BenchmarkStreamParser(b *testing.B) {
	s, chunks := benchStream(b, 2000)
	var p StreamParser
	benchChunks(b, len(s), chunks, parseAll(&p))
	if u, ok := p.Usage(); !ok || u.TotalTokens != 29 || !p.Done() {
		b.Fatal("stream not parsed")
	}
}

// BenchmarkStreamParserEventChunks: one event per chunk, the usual shape
// when the upstream flushes per event.
func BenchmarkStreamParserEventChunks(b *testing.B) {
	s, _ := benchStream(b, 2000)
	var p StreamParser
	benchChunks(b, len(s), refBlocks(s), parseAll(&p))
}

func BenchmarkStreamFilter(b *testing.B) {
	s, chunks := benchStream(b, 2000)
	var f StreamFilter
	benchChunks(b, len(s), chunks, filterAll(&f))
}

func BenchmarkStreamFilterEventChunks(b *testing.B) {
	s, _ := benchStream(b, 2000)
	var f StreamFilter
	benchChunks(b, len(s), refBlocks(s), filterAll(&f))
	if f.Removed() != 1 {
		b.Fatalf("removed %d usage-only events, want 1", f.Removed())
	}
}

func BenchmarkFromJSON(b *testing.B) {
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"chat", readFixture(b, "openai_chat.json")},
		{"embeddings4MB", largeEmbeddings(4 << 20)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			start := cpuclock.Start()
			for b.Loop() {
				if _, ok := FromJSON(c.body); !ok {
					b.Fatal("no usage")
				}
			}
			cpuclock.ReportMBps(b, start, len(c.body))
		})
	}
}

func BenchmarkGzipStream(b *testing.B) {
	s, _ := benchStream(b, 2000)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	for _, blk := range refBlocks(s) {
		zw.Write(blk)
		zw.Flush()
	}
	zw.Close()
	z := buf.Bytes()
	b.SetBytes(int64(len(s))) // decompressed bytes per op
	b.ReportAllocs()
	for b.Loop() {
		g := NewGzipStream(io.Discard)
		for i := 0; i < len(z); i += 512 {
			if _, err := g.Write(z[i:min(i+512, len(z))]); err != nil {
				b.Fatal(err)
			}
		}
		if err := g.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStreamZeroAllocs: steady-state Write allocates nothing, for the
// parser and the filter, with chunks cut mid-event.
func TestStreamZeroAllocs(t *testing.T) {
	_, chunks := benchStream(t, 200)
	var p StreamParser
	var f StreamFilter
	run := func() {
		p.Reset()
		f.Reset()
		for _, c := range chunks {
			p.Write(c)
			f.Write(c)
		}
		f.Flush()
	}
	run() // warm the buffers
	if a := testing.AllocsPerRun(5, run); a != 0 {
		t.Fatalf("%.1f allocations per stream of %d chunks, want 0", a, len(chunks))
	}
}
