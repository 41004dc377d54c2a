package envoymsg

import (
	"strings"
	"sync"
)

// hostInfo is what the upstream filter needs from an endpoint's metadata.
type hostInfo struct{ backend, model string }

// The cache is bounded by bytes, not entries: the texts come from Envoy,
// one per endpoint of the generated config (a few hundred bytes each), but a
// misbehaving peer can send any text, and an entry bound let 64 distinct
// 1 MiB texts pin 70 MiB.
const (
	// defaultHostCacheBytes bounds the sum of entry sizes: thousands of
	// real endpoints fit many times over.
	defaultHostCacheBytes = 4 << 20
	// defaultHostEntryBytes is the largest entry cached; a larger text is
	// parsed on every use (no generated endpoint comes near it).
	defaultHostEntryBytes = 16 << 10
	// hostEntryOverhead is charged per entry besides its strings: the map
	// slot, string and struct headers. It keeps tiny texts from growing
	// the map without bound under the byte limit.
	hostEntryOverhead = 96
)

// HostCache maps the xds.upstream_host_metadata attribute text to its
// parsed fields. Reads take a shared lock; entries are never stale because
// the text is the whole input. The zero value is ready to use with the
// default bounds.
type HostCache struct {
	mu    sync.RWMutex
	m     map[string]hostInfo
	bytes int // sum of hostEntrySize over m
	// maxBytes bounds bytes and maxEntry one entry's size; zero takes the
	// defaults (tests set them small).
	maxBytes, maxEntry int
}

func hostEntrySize(text string, h hostInfo) int {
	return len(text) + len(h.backend) + len(h.model) + hostEntryOverhead
}

func (c *HostCache) get(text string) (hostInfo, bool) {
	c.mu.RLock()
	h, ok := c.m[text]
	c.mu.RUnlock()
	return h, ok
}

func (c *HostCache) put(text string, h hostInfo) {
	maxBytes, maxEntry := c.maxBytes, c.maxEntry
	if maxBytes <= 0 {
		maxBytes = defaultHostCacheBytes
	}
	if maxEntry <= 0 {
		maxEntry = defaultHostEntryBytes
	}
	size := hostEntrySize(text, h)
	if size > maxEntry || size > maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[text]; ok {
		return
	}
	if c.m == nil || c.bytes+size > maxBytes {
		// Full: start over instead of tracking recency. A stable config's
		// texts fill a fraction of the bound, so only a flood of distinct
		// texts (or a config with far more endpoints) gets here, and then
		// the cost is re-parsing, which is what a miss costs anyway.
		c.m = make(map[string]hostInfo)
		c.bytes = 0
	}
	// Own copies: the cache must not keep the request message's buffers.
	c.m[strings.Clone(text)] = hostInfo{strings.Clone(h.backend), strings.Clone(h.model)}
	c.bytes += size
}

// size reports the entries and bytes held (tests, debugging).
func (c *HostCache) size() (entries, bytes int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m), c.bytes
}
