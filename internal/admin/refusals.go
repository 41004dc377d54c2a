package admin

import (
	"sync"
	"time"
	"unicode/utf8"
)

// Refusal is one request swarmgate refused (rate limit, budget, no healthy
// key, auth). Model may be what the client sent, so it is shown escaped and
// cut to a bounded length, and never used as a metric label.
type Refusal struct {
	Time   time.Time `json:"time"`
	Tenant string    `json:"tenant"` // empty before authentication
	Model  string    `json:"model"`
	Status int       `json:"status"`
	Reason string    `json:"reason"`
}

// DefaultRefusals is the RefusalLog size when none is given.
const DefaultRefusals = 200

// maxRefusalField bounds each string field kept per refusal.
const maxRefusalField = 200

// RefusalLog keeps the most recent refusals in a fixed ring buffer: memory
// is bounded whatever the refusal rate. Safe for concurrent use; a nil
// *RefusalLog drops everything.
type RefusalLog struct {
	mu    sync.Mutex
	buf   []Refusal
	next  int
	n     int
	total uint64
}

// NewRefusalLog returns a log keeping the last size refusals
// (DefaultRefusals when size <= 0).
func NewRefusalLog(size int) *RefusalLog {
	if size <= 0 {
		size = DefaultRefusals
	}
	return &RefusalLog{buf: make([]Refusal, size)}
}

// Add records r, stamping it now if it has no time.
func (l *RefusalLog) Add(r Refusal) {
	if l == nil {
		return
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	r.Tenant = clip(r.Tenant)
	r.Model = clip(r.Model)
	r.Reason = clip(r.Reason)
	l.mu.Lock()
	l.buf[l.next] = r
	l.next = (l.next + 1) % len(l.buf)
	if l.n < len(l.buf) {
		l.n++
	}
	l.total++
	l.mu.Unlock()
}

// Recent returns up to n refusals, newest first (all kept when n <= 0).
func (l *RefusalLog) Recent(n int) []Refusal {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n <= 0 || n > l.n {
		n = l.n
	}
	out := make([]Refusal, n)
	for i := range n {
		out[i] = l.buf[(l.next-1-i+len(l.buf))%len(l.buf)]
	}
	return out
}

// Total is how many refusals were ever added, kept or not.
func (l *RefusalLog) Total() uint64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// clip cuts s to maxRefusalField bytes on a rune boundary.
func clip(s string) string {
	if len(s) <= maxRefusalField {
		return s
	}
	s = s[:maxRefusalField]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}
