package subkey

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// cache is the in-process copy of every sub-key, indexed by the SHA-256 of
// the plain key. Lookups take a read lock and one map access: expiry is a
// comparison at lookup time, so keys expiring together cost nothing.
type cache struct {
	mu     sync.RWMutex
	byHash map[[sha256.Size]byte]*Key
	byID   map[string]*Key
	// changed is closed (and replaced) on every change: lookups that wait
	// for a key minted a moment ago on another replica (awaitDigest).
	changed chan struct{}
	waiters atomic.Int64 // lookups waiting in awaitDigest
}

// maxWaiters bounds the lookups waiting for a key at once: a client
// presenting made-up keys of the sub-key form holds no more than that many
// streams for the wait; beyond it a key not in the cache is refused at once.
const maxWaiters = 1024

func newCache() *cache {
	return &cache{byHash: map[[sha256.Size]byte]*Key{}, byID: map[string]*Key{}, changed: make(chan struct{})}
}

// notifyLocked wakes the waiters of awaitDigest. Caller holds c.mu.
func (c *cache) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// awaitDigest looks d up, and while it is not there waits for the cache's
// changes, at most wait.
func (c *cache) awaitDigest(d [sha256.Size]byte, wait time.Duration) (*Key, bool) {
	if c.waiters.Add(1) > maxWaiters {
		c.waiters.Add(-1)
		return c.lookup(d)
	}
	defer c.waiters.Add(-1)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		c.mu.RLock()
		k, ok := c.byHash[d]
		changed := c.changed
		c.mu.RUnlock()
		if ok {
			return k, true
		}
		select {
		case <-changed:
		case <-timer.C:
			return nil, false
		}
	}
}

func digest(hash string) ([sha256.Size]byte, bool) {
	var d [sha256.Size]byte
	h, ok := strings.CutPrefix(hash, "sha256:")
	if !ok {
		return d, false
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != sha256.Size {
		return d, false
	}
	copy(d[:], b)
	return d, true
}

// put stores k (replacing any key of the same id); k is not changed after.
func (c *cache) put(k *Key) {
	d, ok := digest(k.Hash)
	if !ok {
		return
	}
	k.owned, k.tenant = virtualKey(k), &narrowedCache{}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.byID[k.ID]; old != nil {
		if od, ok := digest(old.Hash); ok {
			delete(c.byHash, od)
		}
	}
	c.byID[k.ID] = k
	c.byHash[d] = k
	c.notifyLocked()
}

func (c *cache) remove(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.byID[id]; old != nil {
		if od, ok := digest(old.Hash); ok {
			delete(c.byHash, od)
		}
		delete(c.byID, id)
	}
}

// replace swaps the whole content, after a resync.
func (c *cache) replace(keys []*Key) {
	byHash := make(map[[sha256.Size]byte]*Key, len(keys))
	byID := make(map[string]*Key, len(keys))
	for _, k := range keys {
		if d, ok := digest(k.Hash); ok {
			k.owned, k.tenant = virtualKey(k), &narrowedCache{}
			byHash[d] = k
			byID[k.ID] = k
		}
	}
	c.mu.Lock()
	c.byHash, c.byID = byHash, byID
	c.notifyLocked()
	c.mu.Unlock()
}

func (c *cache) lookup(d [sha256.Size]byte) (*Key, bool) {
	c.mu.RLock()
	k, ok := c.byHash[d]
	c.mu.RUnlock()
	return k, ok
}

func (c *cache) get(id string) (*Key, bool) {
	c.mu.RLock()
	k, ok := c.byID[id]
	c.mu.RUnlock()
	return k, ok
}

func (c *cache) all() []*Key {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*Key, 0, len(c.byID))
	for _, k := range c.byID {
		out = append(out, k)
	}
	return out
}
