package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/swarmgate/swarmgate/internal/childproc"
)

// ListenPrefix starts the line a server child prints on stdout once it
// listens: "LISTEN 127.0.0.1:port".
const ListenPrefix = "LISTEN "

// Child is a server running in its own process, so that its CPU time and
// memory are its own and the load generator does not share its Go runtime.
type Child struct {
	Addr  string
	PID   int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error
}

// StartChild runs exe with args and waits (bounded by ctx) for its LISTEN
// line. The child must exit when its stdin closes.
func StartChild(ctx context.Context, exe string, args ...string) (*Child, error) {
	cmd := childproc.Command(exe, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("loadgen: child stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("loadgen: child stdout: %w", err)
	}
	cmd.Stderr = os.Stderr // the server's warnings reach the terminal
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("loadgen: start %s: %w", exe, err)
	}
	c := &Child{PID: cmd.Process.Pid, cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, ListenPrefix) {
				lines <- strings.TrimPrefix(l, ListenPrefix)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		c.done <- cmd.Wait()
	}()
	select {
	case addr := <-lines:
		c.Addr = addr
		return c, nil
	case err := <-c.done:
		return nil, fmt.Errorf("loadgen: child exited before listening: %v", err)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("loadgen: child did not listen: %w", ctx.Err())
	}
}

// Stop closes the child's stdin and waits up to timeout for it to exit
// (it writes its profile then), killing it after that.
func (c *Child) Stop(timeout time.Duration) error {
	_ = c.stdin.Close()
	select {
	case err := <-c.done:
		return err
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.done
		return errors.New("loadgen: child killed after stop timeout")
	}
}
