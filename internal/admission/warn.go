package admission

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// warnInterval is the least time between two warnings of one kind.
const warnInterval = 10 * time.Second

// warnEvery logs a recurring failure at most once per warnInterval, with
// how many it left out since the last line.
type warnEvery struct {
	next       atomic.Int64 // unix nanoseconds of the next allowed line
	suppressed atomic.Int64
}

func (w *warnEvery) warn(log *slog.Logger, msg string, err error, args ...any) {
	now := time.Now().UnixNano()
	next := w.next.Load()
	if now < next || !w.next.CompareAndSwap(next, now+int64(warnInterval)) {
		w.suppressed.Add(1)
		return
	}
	log.Warn(msg, append([]any{"error", err, "suppressed_since_last", w.suppressed.Swap(0)}, args...)...)
}
