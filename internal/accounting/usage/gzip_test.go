package usage

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"
)

// gzipByEvent compresses an SSE stream the way a streaming server does:
// one flush per event. It returns the compressed bytes and, for each event,
// the compressed offset after its flush.
func gzipByEvent(t testing.TB, stream []byte) ([]byte, []int, [][]byte) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	var offs []int
	blocks := refBlocks(stream)
	for _, b := range blocks {
		if _, err := zw.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := zw.Flush(); err != nil {
			t.Fatal(err)
		}
		offs = append(offs, buf.Len())
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), offs, blocks
}

func TestGzipStreamSplits(t *testing.T) {
	for _, name := range []string{"openai_chat_include_usage.sse", "azure_chat.sse", "crlf_multiline.sse"} {
		t.Run(name, func(t *testing.T) {
			stream := readFixture(t, name)
			z, _, _ := gzipByEvent(t, stream)
			splits(z, 50, func(split string, chunks [][]byte) {
				var out bytes.Buffer
				g := NewGzipStream(&out)
				for _, c := range chunks {
					if _, err := g.Write(c); err != nil {
						t.Fatalf("%s: Write: %v", split, err)
					}
				}
				if err := g.Close(); err != nil {
					t.Fatalf("%s: Close: %v", split, err)
				}
				if !bytes.Equal(out.Bytes(), stream) {
					t.Fatalf("%s: decoded %d bytes, want %d", split, out.Len(), len(stream))
				}
			})
		})
	}
}

// TestGzipStreamIncremental: once the compressed bytes up to an event's
// flush are written, that event has been decoded, before Close.
func TestGzipStreamIncremental(t *testing.T) {
	stream := readFixture(t, "openai_tool_calls.sse")
	z, offs, blocks := gzipByEvent(t, stream)
	var out bytes.Buffer
	var p StreamParser
	g := NewGzipStream(io.MultiWriter(&out, p.Writer()))
	prev, want := 0, 0
	for i, off := range offs {
		// Feed in two pieces to cross chunk boundaries inside the event.
		mid := prev + (off-prev)/2
		for _, c := range [][]byte{z[prev:mid], z[mid:off]} {
			if _, err := g.Write(c); err != nil {
				t.Fatal(err)
			}
		}
		want += len(blocks[i])
		if out.Len() != want {
			t.Fatalf("after event %d: decoded %d bytes, want %d", i, out.Len(), want)
		}
		prev = off
	}
	if u, ok := p.Usage(); !ok || u.TotalTokens != 113 || !p.Done() {
		t.Fatalf("usage before Close: %+v %v done %v", u, ok, p.Done())
	}
	if _, err := g.Write(z[prev:]); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestGzipStreamErrors(t *testing.T) {
	stream := readFixture(t, "openai_chat_include_usage.sse")
	z, _, _ := gzipByEvent(t, stream)

	t.Run("truncated", func(t *testing.T) {
		g := NewGzipStream(io.Discard)
		if _, err := g.Write(z[:len(z)-5]); err != nil {
			t.Fatal(err)
		}
		if err := g.Close(); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("Close = %v, want ErrUnexpectedEOF", err)
		}
	})
	t.Run("not gzip", func(t *testing.T) {
		g := NewGzipStream(io.Discard)
		_, err := g.Write([]byte("data: {}\n\n and more bytes than a header"))
		if !errors.Is(err, gzip.ErrHeader) {
			t.Fatalf("Write = %v, want gzip.ErrHeader", err)
		}
		if _, err2 := g.Write(z); !errors.Is(err2, gzip.ErrHeader) {
			t.Fatalf("second Write = %v, want the sticky error", err2)
		}
		if err := g.Close(); !errors.Is(err, gzip.ErrHeader) {
			t.Fatalf("Close = %v", err)
		}
	})
	t.Run("corrupt body", func(t *testing.T) {
		bad := clone(z)
		for i := 20; i < len(bad)-8; i++ {
			bad[i] ^= 0x5a
		}
		g := NewGzipStream(io.Discard)
		_, werr := g.Write(bad)
		cerr := g.Close()
		if werr == nil && cerr == nil {
			t.Fatal("corrupt stream accepted")
		}
	})
	t.Run("writer error", func(t *testing.T) {
		boom := errors.New("boom")
		g := NewGzipStream(errWriter{boom})
		_, err := g.Write(z)
		if !errors.Is(err, boom) {
			t.Fatalf("Write = %v", err)
		}
		if err := g.Close(); !errors.Is(err, boom) {
			t.Fatalf("Close = %v", err)
		}
	})
	t.Run("empty and double close", func(t *testing.T) {
		g := NewGzipStream(io.Discard)
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Write(z); err == nil {
			t.Fatal("write after close accepted")
		}
	})
	t.Run("concatenated members", func(t *testing.T) {
		var out bytes.Buffer
		g := NewGzipStream(&out)
		both := append(clone(z), z...)
		for i := 0; i < len(both); i += 7 {
			if _, err := g.Write(both[i:min(i+7, len(both))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := g.Close(); err != nil || out.Len() != 2*len(stream) {
			t.Fatalf("Close = %v, decoded %d", err, out.Len())
		}
	})
}

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }

// TestGzipStreamNoLeak: after Close, on every path, the decoder goroutine
// is gone.
func TestGzipStreamNoLeak(t *testing.T) {
	z, _, _ := gzipByEvent(t, readFixture(t, "openai_chat_include_usage.sse"))
	before := runtime.NumGoroutine()
	for _, in := range [][]byte{z, z[:len(z)/2], []byte("not gzip at all, really not")} {
		for i := 0; i < 20; i++ {
			g := NewGzipStream(io.Discard)
			_, _ = g.Write(in)
			_ = g.Close()
		}
	}
	g := NewGzipStream(errWriter{errors.New("boom")})
	_, _ = g.Write(z)
	_ = g.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before", runtime.NumGoroutine(), before)
		}
		runtime.Gosched()
	}
}
