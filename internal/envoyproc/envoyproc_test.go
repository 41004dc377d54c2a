package envoyproc

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/envoytest"
	"github.com/swarmgate/swarmgate/internal/porttest"
)

// TestStartWaitReady runs the newest Envoy on a bootstrap with only an
// admin listener: it becomes ready, its process id is live, and a closed
// admin port is reported as not ready once the context ends.
func TestStartWaitReady(t *testing.T) {
	rel := envoytest.Newest(t)
	host, port, _ := net.SplitHostPort(porttest.Addr(t))
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	bs := fmt.Sprintf("admin:\n  address:\n    socket_address: {address: %s, port_value: %s}\n", host, port)
	if err := os.WriteFile(path, []byte(bs), 0o600); err != nil {
		t.Fatal(err)
	}
	p := Start(t, rel.Path, path)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := WaitReady(ctx, "http://"+net.JoinHostPort(host, port)); err != nil {
		t.Fatalf("%v\n%s", err, p.Log())
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/stat", p.PID())); err != nil {
		t.Errorf("envoy pid %d: %v", p.PID(), err)
	}

	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	err := WaitReady(short, "http://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("WaitReady on a closed port: %v, want a deadline error", err)
	}
}
