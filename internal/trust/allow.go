package trust

import (
	"crypto/x509"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/credentials"
)

// AllowList is a listener's allowed client identities, replaced by config
// reloads while the listener serves. Empty, it allows any client the TLS
// handshake let through (any certificate the client CA signed, or none
// without mutual TLS). Each handshake checks the list of the moment; Set
// also closes the open connections whose client identity the new list no
// longer allows, so a removed identity keeps no connection and its client
// must reconnect (and be refused).
type AllowList struct {
	ids atomic.Pointer[[]string]
	log *slog.Logger

	mu    sync.Mutex // orders Set against connections being registered
	conns map[*allowedConn]struct{}
}

// NewAllowList starts with ids; log may be nil.
func NewAllowList(ids []string, log *slog.Logger) *AllowList {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &AllowList{log: log, conns: map[*allowedConn]struct{}{}}
	a.store(ids)
	return a
}

func (a *AllowList) store(ids []string) {
	ids = slices.Clone(ids)
	a.ids.Store(&ids)
}

// Allows reports whether the list in force admits cert (nil: a client
// without a certificate).
func (a *AllowList) Allows(cert *x509.Certificate) bool {
	ids := *a.ids.Load()
	if len(ids) == 0 {
		return true
	}
	_, ok := FirstMatch(cert, ids)
	return ok
}

// Set replaces the list and closes the connections it no longer allows:
// their RPCs in flight fail and the client's reconnection is refused at
// the handshake. A connection of an identity still allowed is untouched.
func (a *AllowList) Set(ids []string) {
	a.mu.Lock()
	if !slices.Equal(*a.ids.Load(), ids) {
		a.log.Info("allowed client identities changed", "identities", ids)
	}
	a.store(ids)
	drop := a.takeLocked(a.Allows)
	a.mu.Unlock()
	a.close(drop, "its client identity is no longer allowed")
}

// CloseUnless closes the open connections whose client certificate keep
// rejects: a listener's own per-identity policy changed (xDS node groups),
// and a client that keeps its connection across a certificate renewal
// must come back with its new certificate. The allow-list is unchanged.
func (a *AllowList) CloseUnless(keep func(*x509.Certificate) bool, why string) {
	a.mu.Lock()
	drop := a.takeLocked(keep)
	a.mu.Unlock()
	a.close(drop, why)
}

// takeLocked removes and returns the connections keep rejects.
func (a *AllowList) takeLocked(keep func(*x509.Certificate) bool) []*allowedConn {
	var drop []*allowedConn
	for c := range a.conns {
		if !keep(c.cert) {
			drop = append(drop, c)
			delete(a.conns, c)
		}
	}
	return drop
}

func (a *AllowList) close(conns []*allowedConn, why string) {
	for _, c := range conns {
		a.log.Warn("TLS connection closed: "+why, "identities", Describe(c.cert), "peer", c.RemoteAddr().String())
		_ = c.Conn.Close()
	}
}

// track registers a connection that passed the handshake. It re-checks
// under the lock: a Set that ran after the handshake's check and before
// this registration would otherwise miss the connection.
func (a *AllowList) track(conn net.Conn, cert *x509.Certificate) (net.Conn, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.Allows(cert) {
		return nil, false
	}
	c := &allowedConn{Conn: conn, cert: cert, list: a}
	a.conns[c] = struct{}{}
	return c, true
}

func (a *AllowList) forget(c *allowedConn) {
	a.mu.Lock()
	delete(a.conns, c)
	a.mu.Unlock()
}

// allowedConn is a server connection with the client identity it
// authenticated as.
type allowedConn struct {
	net.Conn
	cert *x509.Certificate
	list *AllowList
	once sync.Once
}

func (c *allowedConn) Close() error {
	c.once.Do(func() { c.list.forget(c) })
	return c.Conn.Close()
}

// allowListCreds are TLS server credentials that hand each connection to
// the allow-list, which closes it when a reload removes its identity.
type allowListCreds struct {
	credentials.TransportCredentials
	list *AllowList
}

func (c *allowListCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	var cert *x509.Certificate
	if t, ok := info.(credentials.TLSInfo); ok && len(t.State.PeerCertificates) > 0 {
		cert = t.State.PeerCertificates[0]
	}
	tracked, ok := c.list.track(conn, cert)
	if !ok {
		conn.Close()
		return nil, nil, errNotAllowed(cert)
	}
	return tracked, info, nil
}

func (c *allowListCreds) Clone() credentials.TransportCredentials {
	return &allowListCreds{TransportCredentials: c.TransportCredentials.Clone(), list: c.list}
}
