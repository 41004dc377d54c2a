//go:build unix

package porttest

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// lock takes an advisory lock on the port for the rest of this process's
// life, so test binaries that `go test ./...` runs side by side never pick
// the same port. The kernel drops the lock when the process exits, however
// it exits, so nothing stale is left behind.
func lock(p int) bool {
	dir := filepath.Join(os.TempDir(), "swarmgate-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true // no shared directory: the in-process registry still holds
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	// f stays open, deliberately: closing it would release the lock.
	held = append(held, f)
	return true
}

// held keeps the lock files open (and reachable) until the process exits.
var held []*os.File
