package redistest

import (
	"errors"
	"net"
	"os/exec"
	"testing"
)

// A port another process took between freePort and redis-server binding it
// is reported as such (StartWith then picks another), and a port held by
// another test's redis-server is not mistaken for ours being ready.
func TestLaunchReportsPortTaken(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found on PATH: %v", err)
	}
	tests := []struct {
		name string
		hold func(t *testing.T) string // takes a port, returns its address
	}{
		{"by a plain listener", func(t *testing.T) string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l.Addr().String()
		}},
		{"by another redis-server", func(t *testing.T) string { return Start(t).Addr }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.hold(t)
			s := &Server{t: t, dir: t.TempDir(), Addr: addr}
			s.port = addrPort(t, addr)
			t.Cleanup(s.Stop)
			if err := s.launch(bin); !errors.Is(err, errPortTaken) {
				t.Fatalf("launch on a taken port: %v, want errPortTaken", err)
			}
			if s.cmd != nil {
				t.Error("the exited process is still recorded")
			}
		})
	}
}

func addrPort(t *testing.T, addr string) int {
	t.Helper()
	a, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return a.Port
}
