//go:build !linux

package childproc

import "syscall"

func attr() *syscall.SysProcAttr { return nil }
