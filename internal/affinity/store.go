package affinity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Owner is the backend and key that created a response, and the tenant it
// was created for (only that tenant may continue it).
type Owner struct {
	Backend string
	Key     string
	Tenant  string
}

// ErrNotFound: no owner is recorded for the response (never seen, or older
// than the TTL).
var ErrNotFound = errors.New("affinity: response not known")

// Options configure a Store.
type Options struct {
	// Prefix is the Redis key prefix (config redis.key_prefix).
	Prefix string
	// ReadTimeout bounds one lookup (config redis.read_timeout); writes
	// get the same bound per batch.
	ReadTimeout time.Duration
	// Queue is how many records may wait for Run; default 4096.
	Queue  int
	Logger *slog.Logger
	// Registerer, when set, gets the store's metrics (metrics.go).
	Registerer prometheus.Registerer
}

// Store records and looks up owners in Redis.
type Store struct {
	rdb     redis.UniversalClient
	prefix  string
	timeout time.Duration
	queue   chan record
	log     *slog.Logger
	dropped atomic.Int64
	failed  atomic.Int64
	written atomic.Int64
	lookups *prometheus.CounterVec // by result; nil without a Registerer
}

type record struct {
	id  string
	val string
	ttl time.Duration
}

// maxBatch bounds one pipeline.
const maxBatch = 256

// New returns a Store; call Run to write what Remember queues.
func New(rdb redis.UniversalClient, o Options) *Store {
	if o.Queue <= 0 {
		o.Queue = 4096
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 500 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{rdb: rdb, prefix: o.Prefix + "affinity:resp:", timeout: o.ReadTimeout, queue: make(chan record, o.Queue), log: o.Logger}
	if o.Registerer != nil {
		s.register(o.Registerer)
	}
	return s
}

// encode joins an owner into one value. Backend, key and tenant names
// never hold a newline (config validates names), so newlines separate them.
func encode(o Owner) string { return o.Backend + "\n" + o.Key + "\n" + o.Tenant }

func decode(v string) (Owner, bool) {
	b, rest, ok1 := strings.Cut(v, "\n")
	k, tn, ok2 := strings.Cut(rest, "\n")
	return Owner{Backend: b, Key: k, Tenant: tn}, ok1 && ok2 && b != "" && k != "" && tn != ""
}

// Remember queues the owner of response id for ttl; it never blocks. A
// full queue drops the record (Dropped): a later request naming it gets a
// 400, which is better than a response path waiting on Redis.
func (s *Store) Remember(id string, o Owner, ttl time.Duration) {
	select {
	case s.queue <- record{id: id, val: encode(o), ttl: ttl}:
	default:
		if s.dropped.Add(1) == 1 {
			s.log.Warn("affinity: queue full; response owners are being dropped")
		}
	}
}

// Owner looks up who created response id: ErrNotFound when nobody is
// recorded, another error when Redis did not answer within the read
// timeout.
func (s *Store) Owner(ctx context.Context, id string) (Owner, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	v, err := s.rdb.Get(ctx, s.prefix+id).Result()
	switch {
	case errors.Is(err, redis.Nil):
		s.lookup("not_found")
		return Owner{}, ErrNotFound
	case err != nil:
		s.lookup("error")
		return Owner{}, fmt.Errorf("affinity: looking up %q: %w", id, err)
	}
	o, ok := decode(v)
	if !ok {
		s.lookup("not_found")
		return Owner{}, ErrNotFound
	}
	s.lookup("found")
	return o, nil
}

// Dropped counts records lost to a full queue; Failed those Redis refused.
func (s *Store) Dropped() int64 { return s.dropped.Load() }

// Failed counts records whose write failed.
func (s *Store) Failed() int64 { return s.failed.Load() }

// Run writes queued records until ctx ends, each wake-up's batch in one
// pipeline, then writes what is still queued (bounded by the timeout).
func (s *Store) Run(ctx context.Context) error {
	batch := make([]record, 0, maxBatch)
	for {
		select {
		case r := <-s.queue:
			batch = s.drain(append(batch[:0], r))
			s.write(context.WithoutCancel(ctx), batch)
		case <-ctx.Done():
			if batch = s.drain(batch[:0]); len(batch) > 0 {
				s.write(context.WithoutCancel(ctx), batch)
			}
			return nil
		}
	}
}

// drain adds what is queued now, up to maxBatch.
func (s *Store) drain(batch []record) []record {
	for len(batch) < maxBatch {
		select {
		case r := <-s.queue:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

func (s *Store) write(ctx context.Context, batch []record) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range batch {
			p.Set(ctx, s.prefix+r.id, r.val, r.ttl)
		}
		return nil
	})
	if err == nil {
		s.written.Add(int64(len(batch)))
	} else {
		if s.failed.Add(int64(len(batch))) == int64(len(batch)) {
			s.log.Warn("affinity: writing response owners failed", "records", len(batch), "err", err)
		}
	}
}
