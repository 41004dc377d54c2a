package cpuclock

import "testing"

func TestStartAdvancesWithWork(t *testing.T) {
	a := Start()
	if a == 0 {
		t.Skip("no process CPU clock on this platform: ReportMBps reports nothing")
	}
	x := uint64(1)
	for i := range uint64(50_000_000) {
		x = x*6364136223846793005 + i
	}
	if b := Start(); b <= a {
		t.Errorf("CPU time did not advance over %d rounds of work: %v -> %v", x&1, a, b)
	}
}
