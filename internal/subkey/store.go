package subkey

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/config"
)

// ErrNotFound is returned for an id no store holds.
var ErrNotFound = errors.New("subkey: not found")

// Store keeps sub-keys in one Redis hash (<prefix>keys: id -> JSON) and
// announces every change on <prefix>changed; each replica's Store applies
// those announcements to its cache, and reloads everything whenever its
// subscription is (re)established, so a missed message cannot leave a
// revoked key usable.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	log    *slog.Logger
	cache  *cache
	now    func() time.Time
	synced chan struct{}
	// resyncEvery is how often the whole hash is reloaded even when no
	// subscription was re-established: the net under a lost message.
	resyncEvery time.Duration
	retention   atomic.Int64 // SetRetention (sweep.go)
}

// defaultResyncEvery bounds how long a missed announcement (a revocation
// published while a reload had failed) can leave a key stale.
const defaultResyncEvery = time.Minute

// resyncBackoff bounds the wait between two failed full reloads.
const resyncBackoff = 2 * time.Second

// NewStore returns a store; call Run to fill and maintain its cache.
func NewStore(rdb redis.UniversalClient, prefix string, log *slog.Logger) *Store {
	if log == nil {
		log = slog.Default()
	}
	return &Store{rdb: rdb, prefix: prefix, log: log, cache: newCache(), now: time.Now, synced: make(chan struct{}),
		resyncEvery: defaultResyncEvery}
}

func (s *Store) hashKey() string { return s.prefix + "keys" }
func (s *Store) channel() string { return s.prefix + "changed" }

// Synced is closed after the first full load.
func (s *Store) Synced() <-chan struct{} { return s.synced }

// Run subscribes to changes and keeps the cache current until ctx ends.
func (s *Store) Run(ctx context.Context) error {
	ps := s.rdb.Subscribe(ctx, s.channel())
	// Receive does not watch ctx once it reads: closing ps ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	defer ps.Close()
	first := true
	var loadedAt time.Time // the last full reload
	for {
		wait := s.resyncEvery
		if !first {
			wait = max(s.resyncEvery-time.Since(loadedAt), time.Millisecond)
		}
		msg, err := ps.ReceiveTimeout(ctx, wait)
		if ctx.Err() != nil {
			return nil
		}
		switch m := msg.(type) {
		case nil: // err
			if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
				// go-redis reconnects and resubscribes; a "subscribe" reply follows.
				s.log.Warn("sub-key subscription", "err", err)
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			if !s.resyncUntil(ctx, false) {
				return nil
			}
			loadedAt = time.Now()
			if first {
				close(s.synced)
				first = false
			}
			continue
		case *redis.Message:
			if !s.refresh(ctx, m.Payload) && !s.resyncUntil(ctx, false) {
				return nil
			}
		}
		// Every resyncEvery whatever the traffic (a busy channel used to
		// postpone it for good): the full reload, the net under a lost
		// message, and the sweep of finished keys.
		if !first && time.Since(loadedAt) >= s.resyncEvery {
			if !s.resyncUntil(ctx, true) {
				return nil
			}
			loadedAt = time.Now()
		}
	}
}

// resyncUntil reloads the whole hash, retrying with a growing wait until
// it succeeds (true) or ctx ends (false). A failed reload left alone kept a
// starting replica unready for good (Synced never closed), or a revocation
// announced while the subscription was down unseen until the next one.
func (s *Store) resyncUntil(ctx context.Context, sweep bool) bool {
	wait := 50 * time.Millisecond
	for {
		err := s.resync(ctx, sweep)
		if err == nil {
			return true
		}
		s.log.Warn("sub-key resync; retrying", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		wait = min(2*wait, resyncBackoff)
	}
}

// resync reloads the whole hash into the cache, and with sweep deletes
// the keys finished longer than the retention ago (sweep.go).
func (s *Store) resync(ctx context.Context, sweep bool) error {
	all, err := s.rdb.HGetAll(ctx, s.hashKey()).Result()
	if err != nil {
		return fmt.Errorf("subkey: load: %w", err)
	}
	byID := s.decodeAll(all)
	s.cache.replace(slices.Collect(maps.Values(byID)))
	if sweep {
		s.sweep(ctx, all, byID)
	}
	return nil
}

// refresh applies one announced change; false when it could not be read
// (the caller reloads everything rather than keep a possibly stale key).
func (s *Store) refresh(ctx context.Context, id string) bool {
	raw, err := s.rdb.HGet(ctx, s.hashKey(), id).Result()
	if errors.Is(err, redis.Nil) {
		s.cache.remove(id)
		return true
	}
	if err != nil {
		s.log.Warn("sub-key refresh", "id", id, "err", err)
		return false
	}
	var k Key
	if err := json.Unmarshal([]byte(raw), &k); err != nil {
		s.log.Warn("sub-key unreadable", "id", id, "err", err)
		return true
	}
	s.cache.put(&k)
	return true
}

func (s *Store) save(ctx context.Context, k *Key) error {
	raw, err := json.Marshal(k)
	if err != nil {
		return fmt.Errorf("subkey: encode: %w", err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.hashKey(), k.ID, raw)
		p.Publish(ctx, s.channel(), k.ID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("subkey: save %s: %w", k.ID, err)
	}
	s.cache.put(k)
	return nil
}

// Create stores k (its ID, Hash and times are set here) and returns the
// plain key, which nothing keeps.
func (s *Store) Create(ctx context.Context, k Key) (*Key, string, error) {
	plain, id, err := newSecret()
	if err != nil {
		return nil, "", err
	}
	now := s.now().UTC()
	k.ID, k.Hash, k.CreatedAt, k.UpdatedAt, k.Revoked = id, config.HashKey(plain), now, now, false
	if err := s.save(ctx, &k); err != nil {
		return nil, "", err
	}
	return &k, plain, nil
}

// Get reads a key from Redis (the admin path; the data path uses Lookup).
func (s *Store) Get(ctx context.Context, id string) (*Key, error) {
	k, _, err := s.read(ctx, id)
	return k, err
}

// read is Get with the stored value as read (Update's compare-and-set).
func (s *Store) read(ctx context.Context, id string) (*Key, string, error) {
	raw, err := s.rdb.HGet(ctx, s.hashKey(), id).Result()
	if errors.Is(err, redis.Nil) {
		return nil, "", ErrNotFound
	}
	if err != nil {
		return nil, "", fmt.Errorf("subkey: get %s: %w", id, err)
	}
	var k Key
	if err := json.Unmarshal([]byte(raw), &k); err != nil {
		return nil, "", fmt.Errorf("subkey: decode %s: %w", id, err)
	}
	return &k, raw, nil
}

// updateAttempts bounds how often Update re-reads a key another writer
// changed between its read and its write.
const updateAttempts = 8

// ErrConflict: the key kept changing under Update; the caller may retry.
var ErrConflict = errors.New("subkey: changed concurrently; try again")

// casScript writes a key only if it is still what the writer read, and
// announces it: KEYS[1] the keys hash; ARGV id, the value read, the new
// value, the change channel. 1 written, 0 changed meanwhile.
var casScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[1])
return 1
`)

// Update applies change to the stored key and saves it. The write is a
// compare-and-set on the value read: a plain read-modify-write let an
// update that read the key before a revocation save it back unrevoked.
// change may run more than once (on the key as re-read). A revocation is
// final: no update takes it back.
func (s *Store) Update(ctx context.Context, id string, change func(*Key) error) (*Key, error) {
	for range updateAttempts {
		k, raw, err := s.read(ctx, id)
		if err != nil {
			return nil, err
		}
		revoked := k.Revoked
		if err := change(k); err != nil {
			return nil, err
		}
		k.Revoked = k.Revoked || revoked
		k.UpdatedAt = s.now().UTC()
		next, err := json.Marshal(k)
		if err != nil {
			return nil, fmt.Errorf("subkey: encode: %w", err)
		}
		written, err := casScript.Run(ctx, s.rdb, []string{s.hashKey()}, id, raw, next, s.channel()).Int()
		if err != nil {
			return nil, fmt.Errorf("subkey: save %s: %w", id, err)
		}
		if written == 1 {
			s.cache.put(k)
			return k, nil
		}
	}
	return nil, fmt.Errorf("subkey: update %s: %w", id, ErrConflict)
}

// Revoke marks the key revoked; it stays listed so requests on it answer
// key_revoked rather than an unknown key.
func (s *Store) Revoke(ctx context.Context, id string) (*Key, error) {
	return s.Update(ctx, id, func(k *Key) error { k.Revoked = true; return nil })
}

// List returns the cached keys of tenant ("" for all) carrying every label
// of labels, by id.
func (s *Store) List(tenant string, labels map[string]string) []*Key {
	var out []*Key
next:
	for _, k := range s.cache.all() {
		if tenant != "" && k.Tenant != tenant {
			continue
		}
		for n, v := range labels {
			if k.Labels[n] != v {
				continue next
			}
		}
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Lookup finds the key presented by a client in the cache; no Redis.
func (s *Store) Lookup(presented string) (*Key, bool) {
	return s.cache.lookup(config.KeyDigest(presented))
}

// LookupMinted is Lookup that waits, up to mintedWait, for a key of the
// sub-key form minted a moment ago on another replica (as Authenticate
// does): a planner's fresh minter key may reach any replica first.
func (s *Store) LookupMinted(presented string) (*Key, bool) {
	d := config.KeyDigest(presented)
	if k, ok := s.cache.lookup(d); ok || !strings.HasPrefix(presented, plainPrefix) {
		return k, ok
	}
	return s.cache.awaitDigest(d, mintedWait)
}

// LookupDigest is Lookup for a key already hashed with config.KeyDigest.
func (s *Store) LookupDigest(d [sha256.Size]byte) (*Key, bool) { return s.cache.lookup(d) }
