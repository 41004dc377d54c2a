package trust

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Files are the PEM files of one side of a TLS connection. CA is the bundle
// that verifies the other side; empty means the other side is not verified
// by us (a server without client certificates).
type Files struct {
	Cert, Key, CA string
}

// DefaultReloadInterval bounds how stale a rotated certificate can be: the
// files are re-read at most this often, and only when a handshake needs
// them (no goroutine, nothing to stop).
const DefaultReloadInterval = time.Second

// material is one consistent load of the files.
type material struct {
	cert *tls.Certificate // nil when no Cert/Key
	pool *x509.CertPool   // nil when no CA
	raw  [3][]byte        // file contents, to notice a change
	// server is the per-handshake server config built from this load.
	server *tls.Config
}

// store keeps the last good load and swaps in a new one when the files
// change. A load that fails (a half-written rotation, a missing file) is
// logged and the previous material keeps serving.
type store struct {
	files    Files
	interval time.Duration
	log      *slog.Logger
	build    func(*material) // fills derived fields (the server config)

	cur     atomic.Pointer[material]
	mu      sync.Mutex
	checked time.Time
}

func newStore(f Files, interval time.Duration, log *slog.Logger, build func(*material)) (*store, error) {
	if interval <= 0 {
		interval = DefaultReloadInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &store{files: f, interval: interval, log: log, build: build}
	m, err := s.load(nil)
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	s.checked = time.Now()
	return s, nil
}

// get returns the current material, re-reading the files when the interval
// has passed since the last look.
func (s *store) get() *material {
	m := s.cur.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.checked) < s.interval {
		return s.cur.Load()
	}
	s.checked = time.Now()
	next, err := s.load(m)
	switch {
	case err != nil:
		s.log.Error("TLS files unreadable; the previous certificate keeps serving", "cert", s.files.Cert, "ca", s.files.CA, "err", err)
	case next != m:
		s.cur.Store(next)
		s.log.Info("TLS files reloaded", "cert", s.files.Cert, "ca", s.files.CA, "not_after", notAfter(next))
	}
	return s.cur.Load()
}

// load reads the files; it returns prev itself when nothing changed.
func (s *store) load(prev *material) (*material, error) {
	var raw [3][]byte
	for i, name := range []string{s.files.Cert, s.files.Key, s.files.CA} {
		if name == "" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		raw[i] = b
	}
	if prev != nil && bytes.Equal(prev.raw[0], raw[0]) && bytes.Equal(prev.raw[1], raw[1]) && bytes.Equal(prev.raw[2], raw[2]) {
		return prev, nil
	}
	m := &material{raw: raw}
	if s.files.Cert != "" || s.files.Key != "" {
		c, err := tls.X509KeyPair(raw[0], raw[1])
		if err != nil {
			return nil, fmt.Errorf("%s / %s: %w", s.files.Cert, s.files.Key, err)
		}
		m.cert = &c
	}
	if s.files.CA != "" {
		m.pool = x509.NewCertPool()
		if !m.pool.AppendCertsFromPEM(raw[2]) {
			return nil, fmt.Errorf("%s: %w", s.files.CA, errNoPEM)
		}
	}
	if s.build != nil {
		s.build(m)
	}
	return m, nil
}

var errNoPEM = errors.New("no PEM certificate")

func notAfter(m *material) string {
	if m.cert == nil || len(m.cert.Certificate) == 0 {
		return ""
	}
	c, err := x509.ParseCertificate(m.cert.Certificate[0])
	if err != nil {
		return ""
	}
	return c.NotAfter.UTC().Format(time.RFC3339)
}
