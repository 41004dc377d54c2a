// Package porttest hands tests loopback ports for servers that bind their
// own sockets (Envoy, the rate-limit service, redis-server, a gateway
// listener named in a config file).
//
// Listening on port 0 and closing the socket is not enough: Linux gives the
// same port to the next bind(0) (two listeners of one test config then
// collide) and to any outgoing connection on the machine. Ports here come
// from below the kernel's ephemeral range, are never handed out twice in
// one process, and are locked against the other test processes running at
// the same time for as long as this process lives.
package porttest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// The range sits below Linux's default ephemeral range (32768–60999), so
// neither bind(0) nor an outgoing connect takes a port from it.
const (
	low  = 20000
	high = 32768
)

// registry is process-wide on purpose: its job is that two tests of one
// binary, each building its own stack, never get the same port.
var registry = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// Addr returns "127.0.0.1:port" for a port no other test holds.
func Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(t)))
}

// Port returns a loopback port no other test holds and nothing listens on.
func Port(t testing.TB) int {
	t.Helper()
	p, err := take()
	if err != nil {
		t.Fatalf("porttest: %v", err)
	}
	return p
}

func take() (int, error) {
	registry.Lock()
	defer registry.Unlock()
	for range 2000 {
		p := low + rand.IntN(high-low)
		if registry.given[p] || !bindable(p) || !lock(p) {
			continue
		}
		registry.given[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("no free loopback port in %d-%d", low, high-1)
}

// bindable reports whether both TCP and UDP can bind the port now (Envoy's
// and redis-server's listeners are TCP; UDP keeps a later DNS or statsd
// sink off it too).
func bindable(p int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}
