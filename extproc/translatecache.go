package extproc

import (
	"hash/maphash"
	"sync"

	"github.com/swarmgate/swarmgate/extproc/translate"
)

// The router-level filter translates a body once to check the translator
// can express it (untranslatable); the first attempt's upstream filter
// would translate the same body again for the same backend family. When
// both run on this replica, the attempt takes the router's result
// instead: a 64 KB prompt costs 0.5–1.3 ms per translation
// (docs/performance.md). The attempt on another replica, a retry, or one
// whose options differ translates as before.

// Bounds of the kept translations: a translation not taken soon (the
// attempt went to a native backend or another replica) is dropped first.
const (
	translationsMaxEntries = 64
	translationsMaxBytes   = 8 << 20
)

// bodySeed keys translations by the body they were made from: the
// attempt's body is the client's unless the router rewrote it (usage
// injection), and a rewritten body must not reuse the old translation.
var bodySeed = maphash.MakeSeed()

// translationKey is everything a request translation depends on. The
// hosted-tools policy is not in it: the router's check refuses hosted
// tools where an attempt would drop them only when a native target exists,
// and a check that succeeded had none to drop, so both give the same body.
type translationKey struct {
	requestID        string
	tr               *translate.Translator
	model            string
	maxTokensField   string
	defaultMaxTokens int
	body             uint64
	size             int
}

// keptTranslation is a translated body and the hosted tools it dropped.
type keptTranslation struct {
	body    []byte
	dropped []string
}

// translationCache keeps the router's translations for the first
// attempt, bounded in entries and bytes, oldest out first. The zero value
// is ready.
type translationCache struct {
	mu      sync.Mutex
	entries map[translationKey]keptTranslation
	order   []translationKey // insertion order; taken keys stay until evicted
	bytes   int
}

func bodyHash(body []byte) uint64 { return maphash.Bytes(bodySeed, body) }

// put keeps a translation for the attempt.
func (c *translationCache) put(k translationKey, t keptTranslation) {
	if len(t.body) > translationsMaxBytes/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = make(map[translationKey]keptTranslation, translationsMaxEntries)
	}
	if _, dup := c.entries[k]; dup {
		return
	}
	for len(c.order) > 0 && (len(c.entries) >= translationsMaxEntries || c.bytes+len(t.body) > translationsMaxBytes ||
		len(c.order) >= 2*translationsMaxEntries) {
		old := c.order[0]
		c.order = c.order[1:]
		if e, ok := c.entries[old]; ok {
			c.bytes -= len(e.body)
			delete(c.entries, old)
		}
	}
	c.entries[k] = t
	c.order = append(c.order, k)
	c.bytes += len(t.body)
}

// take returns and forgets the translation kept under k: only one attempt
// gets it (the body is handed to Envoy, which owns it from then on).
func (c *translationCache) take(k translationKey) (keptTranslation, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.entries[k]
	if ok {
		delete(c.entries, k)
		c.bytes -= len(t.body)
	}
	return t, ok
}
