//go:build !unix

package usage

import (
	"testing"
	"time"
)

func cpuMBps(*testing.B, time.Duration, int) {}

func cpuNow() time.Duration { return 0 }
