package usage

import (
	"compress/gzip"
	"errors"
	"io"
)

// GzipStream decodes a gzip response body (Content-Encoding: gzip) that
// arrives in chunks, writing decompressed bytes to w as soon as the
// decoder can produce them, so that usage in a compressed SSE stream is seen
// chunk by chunk and nothing is decompressed twice.
//
// compress/flate only pulls from an io.Reader and its errors are sticky, so
// it cannot be paused at the end of a chunk and resumed. The decoder
// therefore runs on its own goroutine, reading each chunk in place: Write
// hands a chunk over and returns once the decoder has consumed all of it and
// asks for more (every byte decodable from it has then been written to w;
// deflate may keep up to a block of output until the upstream flushes).
// The goroutine exists only between the first Write and Close: always call
// Close.
type GzipStream struct {
	w       io.Writer
	in      gzipInput
	started bool
	closed  bool
	err     error // sticky
}

// NewGzipStream returns a decoder writing decompressed bytes to w. Writes to
// w happen on another goroutine, but only while Write or Close is running.
func NewGzipStream(w io.Writer) *GzipStream {
	return &GzipStream{w: w}
}

var errWriteAfterClose = errors.New("gzip stream: write after close")

// Write decodes a compressed chunk. After an error every call returns it.
func (g *GzipStream) Write(p []byte) (int, error) {
	switch {
	case g.closed:
		return 0, errWriteAfterClose
	case g.err != nil:
		return 0, g.err
	case len(p) == 0:
		return 0, nil
	}
	if !g.started {
		g.started = true
		g.in.chunks = make(chan []byte)
		g.in.ack = make(chan error)
		go g.decode()
	}
	g.in.chunks <- p
	if err := <-g.in.ack; err != nil {
		g.err = err
		return 0, err
	}
	return len(p), nil
}

// Close ends the input and waits for the decoder to finish. It returns
// io.ErrUnexpectedEOF for a truncated stream and nil for a complete one
// (or an empty body).
func (g *GzipStream) Close() error {
	if g.closed {
		return g.err
	}
	g.closed = true
	if !g.started {
		return nil
	}
	close(g.in.chunks)
	if err := <-g.in.ack; g.err == nil {
		g.err = err
	}
	return g.err
}

// decode runs on its own goroutine from the first Write to Close.
func (g *GzipStream) decode() {
	err := g.run()
	if g.in.pending { // a Write waits for this chunk: fail it
		g.in.pending = false
		g.in.ack <- err
	}
	for range g.in.chunks { // Write sends nothing after an error; wait for Close
	}
	g.in.ack <- err
}

func (g *GzipStream) run() error {
	zr, err := gzip.NewReader(&g.in)
	if err != nil {
		return eofIsUnexpected(err)
	}
	buf := make([]byte, 16<<10)
	for {
		n, err := zr.Read(buf)
		if n > 0 {
			if _, werr := g.w.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil // gzip.Reader saw a clean end (after Close, since it is multistream)
		}
		if err != nil {
			return eofIsUnexpected(err)
		}
	}
}

func eofIsUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// gzipInput feeds the decoder the chunks Write hands over, in place. It is
// an io.ByteReader, so flate and gzip read it directly, without a bufio
// layer reading ahead of the chunk.
type gzipInput struct {
	chunks  chan []byte
	ack     chan error // nil: chunk consumed; else the decoder failed
	cur     []byte
	pending bool // cur came from a Write still waiting for its ack
}

func (r *gzipInput) next() bool {
	for len(r.cur) == 0 {
		if r.pending {
			r.pending = false
			r.ack <- nil
		}
		p, ok := <-r.chunks
		if !ok {
			return false
		}
		r.cur, r.pending = p, true
	}
	return true
}

func (r *gzipInput) ReadByte() (byte, error) {
	if len(r.cur) == 0 && !r.next() {
		return 0, io.EOF
	}
	c := r.cur[0]
	r.cur = r.cur[1:]
	return c, nil
}

func (r *gzipInput) Read(p []byte) (int, error) {
	if len(r.cur) == 0 && !r.next() {
		return 0, io.EOF
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}
