//go:build !unix

package porttest

// lock has no cross-process lock off unix; the in-process registry and the
// bind check still hold.
func lock(int) bool { return true }
