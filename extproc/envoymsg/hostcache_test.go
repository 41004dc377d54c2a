package envoymsg

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func TestHostCacheBounds(t *testing.T) {
	small := hostInfo{"relay", "gpt"} // 8 bytes of values
	size := func(textLen int) int { return textLen + 8 + hostEntryOverhead }
	tests := []struct {
		name               string
		maxBytes, maxEntry int
		texts              []string // put in order, each with small
		wantCached         []string // get hits afterwards
		wantMissed         []string
		wantEntries        int
		wantBytes          int
	}{
		{
			name: "fits", maxBytes: 1000, maxEntry: 500,
			texts: []string{"a", "b", "c"}, wantCached: []string{"a", "b", "c"},
			wantEntries: 3, wantBytes: 3 * size(1),
		},
		{
			name: "same text twice is charged once", maxBytes: 1000, maxEntry: 500,
			texts: []string{"a", "a"}, wantCached: []string{"a"},
			wantEntries: 1, wantBytes: size(1),
		},
		{
			name: "entry above the per-entry cap is not cached", maxBytes: 10000, maxEntry: 200,
			texts: []string{strings.Repeat("x", 200), "b"}, wantCached: []string{"b"}, wantMissed: []string{strings.Repeat("x", 200)},
			wantEntries: 1, wantBytes: size(1),
		},
		{
			name: "entry of exactly the cap is cached", maxBytes: 10000, maxEntry: size(50),
			texts: []string{strings.Repeat("y", 50)}, wantCached: []string{strings.Repeat("y", 50)},
			wantEntries: 1, wantBytes: size(50),
		},
		{
			name: "full cache starts over", maxBytes: 3 * size(1), maxEntry: 500,
			texts: []string{"a", "b", "c", "d"}, wantCached: []string{"d"}, wantMissed: []string{"a", "b", "c"},
			wantEntries: 1, wantBytes: size(1),
		},
		{
			name: "zero value takes the defaults", texts: []string{"a", strings.Repeat("z", defaultHostEntryBytes)},
			wantCached: []string{"a"}, wantMissed: []string{strings.Repeat("z", defaultHostEntryBytes)},
			wantEntries: 1, wantBytes: size(1),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &HostCache{maxBytes: tc.maxBytes, maxEntry: tc.maxEntry}
			for _, text := range tc.texts {
				c.put(text, small)
			}
			for _, text := range tc.wantCached {
				if h, ok := c.get(text); !ok || h != small {
					t.Errorf("get(%.10q) = %v %v, want cached", text, h, ok)
				}
			}
			for _, text := range tc.wantMissed {
				if _, ok := c.get(text); ok {
					t.Errorf("get(%.10q) hit, want a miss", text)
				}
			}
			if n, b := c.size(); n != tc.wantEntries || b != tc.wantBytes {
				t.Errorf("size = %d entries, %d bytes; want %d, %d", n, b, tc.wantEntries, tc.wantBytes)
			}
		})
	}
}

// TestHostCacheFloodOfLargeTexts: 64 distinct 1 MiB texts (what pinned
// 70 MiB with an entry bound) leave the cache within its byte bound, and
// the heap does not keep them.
func TestHostCacheFloodOfLargeTexts(t *testing.T) {
	var c HostCache
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range 64 {
		text := fmt.Sprintf("%02d", i) + strings.Repeat("m", 1<<20)
		c.put(text, hostInfo{"relay", "gpt"})
		if _, b := c.size(); b > defaultHostCacheBytes {
			t.Fatalf("after %d texts the cache holds %d bytes, above %d", i+1, b, defaultHostCacheBytes)
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 8<<20 {
		t.Errorf("heap grew by %d MiB after the flood", grown>>20)
	}
	runtime.KeepAlive(&c)

	// Many small distinct texts: the bound holds, entries included.
	for i := range 200000 {
		c.put(fmt.Sprintf("endpoint-%d", i), hostInfo{"relay", "gpt"})
	}
	if n, b := c.size(); b > defaultHostCacheBytes || n*hostEntryOverhead > defaultHostCacheBytes {
		t.Errorf("after 200000 small texts: %d entries, %d bytes", n, b)
	}
}

func TestHostCacheConcurrent(t *testing.T) {
	c := &HostCache{maxBytes: 50 * (hostEntryOverhead + 20)}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				text := fmt.Sprintf("t-%d-%d", g, i%100)
				want := hostInfo{"b" + text, "m"}
				if h, ok := c.get(text); ok && h != want {
					t.Errorf("get(%q) = %v, want %v", text, h, want)
					return
				}
				c.put(text, want)
			}
		})
	}
	wg.Wait()
	if _, b := c.size(); b > c.maxBytes {
		t.Errorf("%d bytes above the bound %d", b, c.maxBytes)
	}
}
