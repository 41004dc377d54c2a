package loadgen

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketBoundsAreMonotonic(t *testing.T) {
	for _, v := range []int64{0, 1, 63, 64, 65, 127, 128, 1000, 1 << 20, 123456789, 1 << 40} {
		i := bucketOf(v)
		if lo, hi := lowerBound(i), lowerBound(i+1); v < lo || v >= hi {
			t.Errorf("value %d in bucket %d [%d,%d)", v, i, lo, hi)
		}
	}
}

func TestQuantilesAgainstSort(t *testing.T) {
	tests := []struct {
		name string
		gen  func(r *rand.Rand) time.Duration
	}{
		{"uniform 10µs-1ms", func(r *rand.Rand) time.Duration {
			return 10*time.Microsecond + time.Duration(r.Int64N(int64(time.Millisecond)))
		}},
		{"long tail", func(r *rand.Rand) time.Duration { return time.Duration(r.ExpFloat64() * float64(50*time.Microsecond)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			var a, b Histogram
			var all []time.Duration
			for i := range 20000 {
				d := tc.gen(r)
				all = append(all, d)
				if i%2 == 0 {
					a.Record(d)
				} else {
					b.Record(d)
				}
			}
			a.Merge(&b)
			slices.Sort(all)
			if a.Count() != uint64(len(all)) {
				t.Fatalf("count %d, want %d", a.Count(), len(all))
			}
			for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
				want := all[int(q*float64(len(all)))-1]
				got := a.Quantile(q)
				if diff := float64(got-want) / float64(want); diff > 0.02 || diff < -0.02 {
					t.Errorf("q%.3f = %v, exact %v (%.1f%% off)", q, got, want, diff*100)
				}
			}
		})
	}
}
