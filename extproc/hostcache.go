package extproc

import "sync"

// hostInfo is what the upstream filter needs from an endpoint's metadata.
type hostInfo struct{ backend, model string }

// maxHosts bounds the cache: the texts come from Envoy, one per endpoint of
// the generated config, but a bound keeps a misbehaving peer from growing it.
const maxHosts = 4096

// hostCache maps the xds.upstream_host_metadata attribute text to its
// parsed fields. Reads take a shared lock; entries are never stale because
// the text is the whole input.
type hostCache struct {
	mu sync.RWMutex
	m  map[string]hostInfo
}

func (c *hostCache) get(text string) (hostInfo, bool) {
	c.mu.RLock()
	h, ok := c.m[text]
	c.mu.RUnlock()
	return h, ok
}

func (c *hostCache) put(text string, h hostInfo) {
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string]hostInfo)
	}
	if len(c.m) < maxHosts {
		c.m[text] = h
	}
	c.mu.Unlock()
}
