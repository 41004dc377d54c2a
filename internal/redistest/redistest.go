// Package redistest starts a real redis-server (the Debian package) on a free
// loopback port for one test. There is no fake: tests that need Redis fail,
// not skip, when redis-server is missing (`make test` installs it).
package redistest

import (
	"bufio"
	"context"
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
)

// Server is one redis-server process.
type Server struct {
	Addr string
	t    testing.TB
	cmd  *exec.Cmd
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
	s.port = freePort(t)
	s.Addr = "127.0.0.1:" + strconv.Itoa(s.port)
	s.start(bin)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start(bin string) {
	s.t.Helper()
	s.cmd = exec.Command(bin, append(append([]string(nil), s.args...),
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--loglevel", "warning",
		"--logfile", filepath.Join(s.dir, "redis.log"))...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	for {
		if err := c.Ping(ctx).Err(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on %s did not become ready: %s", s.Addr, log)
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
	_ = s.cmd.Wait()
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
