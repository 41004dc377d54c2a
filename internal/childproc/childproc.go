// Package childproc starts the helper processes tests and benchmarks run
// (redis-server, Envoy) so that they die with the process that started
// them. Cleanup functions stop them when a test ends, but a test binary
// killed instead (go test's -timeout, a closed output pipe, a CI job
// cancelled) runs none, and its servers outlived it holding ports and CPU.
package childproc

import "os/exec"

// Command is exec.Command for a child that is killed when its parent dies
// (Linux: PR_SET_PDEATHSIG, SIGKILL; elsewhere a plain command). The signal
// follows the OS thread that starts the child, which the Go runtime keeps
// for the process's life unless a goroutine locked to it exits.
func Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = attr()
	return cmd
}
