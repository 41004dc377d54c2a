package porttest

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

func TestPortsAreDistinctAndBindable(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p := Port(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if p < low || p >= high {
			t.Fatalf("port %d outside %d-%d", p, low, high-1)
		}
	}
	l, err := net.Listen("tcp", Addr(t))
	if err != nil {
		t.Fatalf("listen on a handed-out port: %v", err)
	}
	l.Close()
}

// TestAnotherProcessCannotTakeAHeldPort runs this test binary again as a
// second process and has it try to lock a port this process holds.
func TestAnotherProcessCannotTakeAHeldPort(t *testing.T) {
	if p := os.Getenv("PORTTEST_PROBE"); p != "" {
		n, _ := strconv.Atoi(p)
		if lock(n) {
			t.Fatalf("second process locked port %d the first one holds", n)
		}
		return
	}
	p := Port(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestAnotherProcessCannotTakeAHeldPort$")
	cmd.Env = append(os.Environ(), "PORTTEST_PROBE="+strconv.Itoa(p))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("probe process: %v\n%s", err, out)
	}
}
