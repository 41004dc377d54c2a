package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: 2^subBits buckets per power of
// two, so a recorded value is off by at most 1/2^subBits (1.6 %).
const subBits = 6

const (
	subCount = 1 << subBits
	// 64-bit nanoseconds: (64 - subBits + 1) ranges of subCount buckets.
	bucketCount = (64 - subBits + 1) * subCount
)

// Histogram is a log-linear latency histogram (HDR-style) with fixed
// memory and no allocation per sample. It is not safe for concurrent use:
// each worker records into its own and the run merges them.
type Histogram struct {
	counts [bucketCount]uint64
	n      uint64
	sum    float64
	min    int64
	max    int64
}

func bucketOf(v int64) int {
	if v < subCount {
		return int(max(v, 0))
	}
	u := uint64(v)
	exp := bits.Len64(u) - subBits // >= 1
	return exp*subCount + int(u>>(exp-1)) - subCount
}

// lowerBound is the smallest value that falls into bucket i.
func lowerBound(i int) int64 {
	if i < subCount {
		return int64(i)
	}
	exp := i / subCount
	off := i % subCount
	return int64(uint64(subCount+off) << (exp - 1))
}

// Record adds one latency.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += float64(v)
}

// Merge adds o's samples to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of samples.
func (h *Histogram) Count() uint64 { return h.n }

// Quantile is the q-quantile (0 < q <= 1): the midpoint of the bucket that
// holds it, clamped to the observed min and max.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := lowerBound(i), lowerBound(i+1)
			mid := lo + (hi-lo)/2
			return time.Duration(min(max(mid, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}

// Summary is a histogram's figures in microseconds, as written to JSON.
type Summary struct {
	Count  uint64  `json:"count"`
	MeanUS float64 `json:"mean_us"`
	MinUS  float64 `json:"min_us"`
	P50US  float64 `json:"p50_us"`
	P90US  float64 `json:"p90_us"`
	P99US  float64 `json:"p99_us"`
	P999US float64 `json:"p999_us"`
	MaxUS  float64 `json:"max_us"`
}

func us(d time.Duration) float64 { return math.Round(float64(d)/1e1) / 1e2 }

// Summary computes the percentiles.
func (h *Histogram) Summary() Summary {
	if h.n == 0 {
		return Summary{}
	}
	return Summary{
		Count:  h.n,
		MeanUS: us(time.Duration(h.sum / float64(h.n))),
		MinUS:  us(time.Duration(h.min)),
		P50US:  us(h.Quantile(0.50)),
		P90US:  us(h.Quantile(0.90)),
		P99US:  us(h.Quantile(0.99)),
		P999US: us(h.Quantile(0.999)),
		MaxUS:  us(time.Duration(h.max)),
	}
}
