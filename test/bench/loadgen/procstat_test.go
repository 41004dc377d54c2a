package loadgen

import (
	"os"
	"testing"
	"time"
)

func TestReadProcSelf(t *testing.T) {
	before, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn some CPU so the counter must move (10 ms ticks).
	deadline := time.Now().Add(60 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	after, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after.CPU <= before.CPU {
		t.Errorf("CPU %v then %v after a busy loop (%d)", before.CPU, after.CPU, x)
	}
	if after.RSSBytes <= 0 || after.HWMBytes < after.RSSBytes {
		t.Errorf("RSS %d, HWM %d", after.RSSBytes, after.HWMBytes)
	}
}
