package subkey

// Cached returns the key of id from the cache, no Redis: the data path
// walks a key's parents through it (their budgets count too).
func (s *Store) Cached(id string) (*Key, bool) { return s.cache.get(id) }
