// Package cpuclock reports benchmark throughput per CPU-second of the
// process, next to the wall-clock MB/s: on a shared, oversubscribed machine
// wall time mostly measures waiting for a core.
package cpuclock

import (
	"testing"
	"time"
)

// Start is the process's CPU time now; pass it to ReportMBps after the loop.
func Start() time.Duration { return now() }

// ReportMBps reports "cpu-MB/s" for b.N operations of bytesPerOp bytes
// since start. Where the process's CPU time is unknown it reports nothing.
func ReportMBps(b *testing.B, start time.Duration, bytesPerOp int) {
	if d := now() - start; start > 0 && d > 0 {
		b.ReportMetric(float64(b.N)*float64(bytesPerOp)/d.Seconds()/1e6, "cpu-MB/s")
	}
}
