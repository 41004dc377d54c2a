// Package envoyproc runs a real Envoy process for a test or a benchmark:
// started from a bootstrap file, stopped when the test ends, its log shown
// when the test fails, its process id available for CPU accounting, and
// a bounded wait for its admin /ready.
package envoyproc

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/childproc"
	"github.com/swarmgate/swarmgate/internal/logbuf"
)

// Process is one running Envoy.
type Process struct {
	cmd    *exec.Cmd
	log    logbuf.Buffer
	exited chan struct{}
	once   sync.Once
}

// Start runs bin on bootstrapPath until t ends. Hot restart is off, so
// several Envoys on one machine share no memory segment; the admin
// address is the bootstrap's, so give each Envoy its own port.
func Start(t testing.TB, bin, bootstrapPath string, args ...string) *Process {
	t.Helper()
	p := &Process{}
	all := append([]string{"-c", bootstrapPath, "--disable-hot-restart", "--log-level", "warning", "--drain-time-s", "1"}, args...)
	p.cmd = childproc.Command(bin, all...)
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	p.exited = make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("envoy log:\n%s", p.log.String())
		}
	})
	return p
}

// Stop ends Envoy (SIGTERM, then SIGKILL after 10 s) and waits for it;
// later calls do nothing. The test's end stops it too.
func (p *Process) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
}

// Exited is closed once the process has ended.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// PID is the Envoy process's id (for /proc/<pid>/stat).
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Log is what Envoy printed so far.
func (p *Process) Log() string { return p.log.String() }

// WaitReady polls adminURL/ready until Envoy answers 200 (its initial
// xDS fetch is done) or ctx ends.
func WaitReady(ctx context.Context, adminURL string) error {
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, adminURL+"/ready", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("envoy %s/ready: %w (last: %v)", adminURL, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
