package loadgen

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat: 100
// on every Linux architecture Go supports (proc(5)).
const clockTicks = 100

// ProcSample is a process's CPU time and memory at one moment.
type ProcSample struct {
	CPU      time.Duration // user + system
	RSSBytes int64         // VmRSS
	HWMBytes int64         // VmHWM: peak RSS since start
}

// ReadProc reads /proc/<pid>/stat and /proc/<pid>/status.
func ReadProc(pid int) (ProcSample, error) {
	var s ProcSample
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, fmt.Errorf("loadgen: %w", err)
	}
	// The command name (field 2) may hold spaces: fields count from the
	// last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return s, fmt.Errorf("loadgen: /proc/%d/stat: no ')'", pid)
	}
	f := bytes.Fields(stat[i+1:])
	// After ')': state is field 3, utime 14, stime 15.
	if len(f) < 13 {
		return s, fmt.Errorf("loadgen: /proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("loadgen: /proc/%d/stat: bad utime/stime", pid)
	}
	s.CPU = time.Duration(ut+st) * time.Second / clockTicks
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("loadgen: %w", err)
	}
	s.RSSBytes = statusKB(status, "VmRSS:") * 1024
	s.HWMBytes = statusKB(status, "VmHWM:") * 1024
	return s, nil
}

func statusKB(status []byte, field string) int64 {
	i := bytes.Index(status, []byte(field))
	if i < 0 {
		return 0
	}
	line := status[i+len(field):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	f := bytes.Fields(line)
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(string(f[0]), 10, 64)
	return n
}
