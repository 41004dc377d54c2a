//go:build unix

package chatreq

import (
	"syscall"
	"testing"
	"time"
)

// cpuMBps reports throughput per CPU-second of this process as "cpu-MB/s"
// next to the wall-clock MB/s: on a shared, oversubscribed machine wall
// time mostly measures waiting for a core. Call it after the loop with the
// CPU time taken before it.
func cpuMBps(b *testing.B, start time.Duration, bytesPerOp int) {
	if d := cpuNow() - start; d > 0 {
		b.ReportMetric(float64(b.N)*float64(bytesPerOp)/d.Seconds()/1e6, "cpu-MB/s")
	}
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
