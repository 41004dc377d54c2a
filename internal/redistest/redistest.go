// Package redistest starts a real redis-server (the Debian package) on a free
// loopback port for one test. There is no fake: tests that need Redis fail,
// not skip, when redis-server is missing (`make test` installs it).
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/childproc"
	"github.com/swarmgate/swarmgate/internal/porttest"
)

// Server is one redis-server process.
type Server struct {
	Addr string
	t    testing.TB
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	dir  string
	port int
	args []string // before the standard options: a config file, --sentinel, cluster flags
}

// Start launches redis-server on a free port and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t)
}

// StartWith is Start with extra redis-server arguments, placed before the
// standard ones (a sentinel's config file must come first): for example
// "--cluster-enabled", "yes", or conf, "--sentinel". Relative paths are in
// the server's own directory.
func StartWith(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found on PATH: run `make deps` (apt-get install redis-server): %v", err)
	}
	s := &Server{t: t, dir: t.TempDir(), args: args}
	t.Cleanup(s.Stop)
	// A free port can be taken by another test process between freePort
	// closing it and redis-server binding it (go test runs packages in
	// parallel): then pick another.
	for attempt := 1; ; attempt++ {
		s.port = freePort(t)
		s.Addr = "127.0.0.1:" + strconv.Itoa(s.port)
		err := s.launch(bin)
		if err == nil {
			return s
		}
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			t.Fatal(err)
		}
	}
}

// errPortTaken: redis-server exited because its port was in use.
var errPortTaken = errors.New("redistest: port taken")

func (s *Server) start(bin string) {
	s.t.Helper()
	if err := s.launch(bin); err != nil {
		s.t.Fatal(err)
	}
}

// launch starts redis-server on s.port and waits until it answers PING, or
// until it exits (errPortTaken when its port was in use) or 10 s pass.
func (s *Server) launch(bin string) error {
	logPath := filepath.Join(s.dir, "redis.log")
	_ = os.Remove(logPath) // a failed attempt's log must not be read again
	s.cmd = childproc.Command(bin, append(append([]string(nil), s.args...),
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--loglevel", "warning",
		"--logfile", logPath)...)
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	done := make(chan struct{})
	s.done = done
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(done) }(s.cmd)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Ready means this process answers: another test's server may hold the
	// port (then ours exited), so the pid is checked, and each try is short
	// so that an exit is noticed at once.
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	defer c.Close()
	pid := strconv.Itoa(s.cmd.Process.Pid)
	for {
		if v, err := infoField(ctx, c, "process_id"); err == nil && v == pid {
			return nil
		}
		select {
		case <-done:
			s.cmd = nil
			log, _ := os.ReadFile(logPath)
			if strings.Contains(string(log), "Address already in use") {
				return fmt.Errorf("%w: redis-server on %s: %s", errPortTaken, s.Addr, log)
			}
			return fmt.Errorf("redis-server on %s exited before it was ready: %s", s.Addr, log)
		case <-ctx.Done():
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("redis-server on %s did not become ready: %s", s.Addr, log)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop kills the server (idempotent). Data is lost, as with a crash.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart starts the server again on the same port after Stop.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	bin, _ := exec.LookPath("redis-server")
	s.start(bin)
}

// Client returns a go-redis client for the server, closed at test end.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Info returns a field of INFO, e.g. "connected_clients".
func (s *Server) Info(ctx context.Context, field string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	return infoField(ctx, c, field)
}

// infoField reads one field of INFO through c.
func infoField(ctx context.Context, c *redis.Client, field string) (string, error) {
	out, err := c.Info(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("redis info: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == field {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("redis info: no field %q", field)
}

// Cluster starts n redis-server nodes in cluster mode, splits the 16,384
// slots between them and waits until every node sees a converged cluster.
// It returns the nodes' addresses (for redis.NewClusterClient or
// config.Redis.Addrs).
func Cluster(t testing.TB, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addrs := make([]string, n)
	nodes := make([]*redis.Client, n)
	for i := range n {
		addrs[i] = StartWith(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf").Addr
		nodes[i] = redis.NewClient(&redis.Options{Addr: addrs[i], MaxRetries: -1})
		t.Cleanup(func() { _ = nodes[i].Close() })
	}
	for i, c := range nodes {
		if i > 0 {
			host, port, _ := net.SplitHostPort(addrs[i])
			if err := nodes[0].ClusterMeet(ctx, host, port).Err(); err != nil {
				t.Fatalf("cluster meet: %v", err)
			}
		}
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("cluster addslotsrange: %v", err)
		}
	}
	known := "cluster_known_nodes:" + strconv.Itoa(n)
	for _, c := range nodes {
		for {
			info, _ := c.ClusterInfo(ctx).Result()
			if strings.Contains(info, "cluster_state:ok") && strings.Contains(info, known) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("redis cluster did not converge: %s", info)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return addrs
}

func freePort(t testing.TB) int {
	t.Helper()
	return porttest.Port(t)
}
