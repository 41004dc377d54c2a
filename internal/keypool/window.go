package keypool

import "time"

const windowSeconds = 60

// window counts requests and tokens of the last 60 seconds in one-second
// buckets: the local per-replica RPM/TPM check used when no shared
// KeyLimiter is configured (or it is unreachable).
type window struct {
	last   int64 // unix second of the newest bucket written or cleared
	reqs   [windowSeconds]int32
	toks   [windowSeconds]int64
	sumReq int64
	sumTok int64
}

// advance moves the window to unix second s.
func (w *window) advance(s int64) {
	if s <= w.last {
		return
	}
	if s-w.last >= windowSeconds {
		*w = window{last: s}
		return
	}
	for t := w.last + 1; t <= s; t++ {
		i := t % windowSeconds
		w.sumReq -= int64(w.reqs[i])
		w.sumTok -= w.toks[i]
		w.reqs[i], w.toks[i] = 0, 0
	}
	w.last = s
}

// allow reports whether one more request of tokens fits under rpm and tpm
// (0 = unlimited). A request larger than tpm alone is let through when the
// window is empty, so it is not refused forever.
func (w *window) allow(sec int64, rpm, tpm, tokens int) bool {
	w.advance(sec)
	if rpm > 0 && w.sumReq+1 > int64(rpm) {
		return false
	}
	if tpm > 0 && w.sumTok > 0 && w.sumTok+int64(tokens) > int64(tpm) {
		return false
	}
	return true
}

func (w *window) add(sec int64, reqs, tokens int) {
	w.advance(sec)
	i := w.last % windowSeconds
	w.reqs[i] += int32(reqs)
	w.toks[i] += int64(tokens)
	w.sumReq += int64(reqs)
	w.sumTok += int64(tokens)
}

// wait is how long until one more request of tokens fits.
func (w *window) wait(now time.Time, rpm, tpm, tokens int) time.Duration {
	w.advance(now.Unix())
	req, tok := w.sumReq, w.sumTok
	fits := func() bool {
		return (rpm <= 0 || req+1 <= int64(rpm)) && (tpm <= 0 || tok == 0 || tok+int64(tokens) <= int64(tpm))
	}
	if fits() {
		return 0
	}
	for t := w.last - windowSeconds + 1; t <= w.last; t++ {
		i := t % windowSeconds
		req -= int64(w.reqs[i])
		tok -= w.toks[i]
		if fits() {
			return time.Unix(t+windowSeconds, 0).Sub(now)
		}
	}
	return windowSeconds * time.Second
}
