package ledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
)

// Result is what one write did.
type Result struct {
	// Duplicate is true when the request id was already counted.
	Duplicate bool
	// MonthCost is the tenant's spend this month after the write.
	MonthCost pricing.Money
}

// Options configure a Ledger. Zero values take the documented defaults.
type Options struct {
	KeyPrefix string // Redis key prefix (config redis.key_prefix)
	// Buffer is how many entries are kept in memory while Redis is
	// unreachable (config accounting.ledger_buffer).
	Buffer int
	// SpillFile receives the oldest buffered entries as JSON lines when
	// the buffer is full (config accounting.spill_file). Empty: drop them.
	SpillFile string
	// DedupeTTL is how long a request id is remembered (default 72h): a
	// duplicate report later than that would count again.
	DedupeTTL time.Duration
	// Retention is how long day and month counters live (default 400 days).
	Retention time.Duration
	// WriteTimeout bounds one write on the data path (default 500ms).
	WriteTimeout time.Duration
	// RetryInterval is how often Run retries Redis while entries wait
	// (default 250ms).
	RetryInterval time.Duration
	// ReplayBatch is how many entries one replay pipeline carries (64:
	// small enough that its replies arrive within the client's read
	// timeout even on a busy Redis).
	ReplayBatch int
	// AfterWrite, if set, is called after every successful write, also for
	// replayed entries (budgets observe the month spend through it). It
	// runs on the writer's goroutine and must not block.
	AfterWrite func(ctx context.Context, e *Entry, r Result)
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// OptionsFrom takes the ledger options from the configuration.
func OptionsFrom(cfg *config.Config) Options {
	return Options{
		KeyPrefix:    cfg.Redis.KeyPrefix,
		Buffer:       cfg.Accounting.LedgerBuffer,
		SpillFile:    cfg.Accounting.SpillFile,
		WriteTimeout: cfg.Redis.ReadTimeout.D(),
	}
}

// Ledger writes usage entries to Redis and reads them back.
type Ledger struct {
	rdb  redis.UniversalClient
	opts Options
	log  *slog.Logger
	m    *metrics

	healthy atomic.Bool
	buf     *buffer
	wake    chan struct{}
	// replayMu serialises replays (Run) and the final flush (Close).
	replayMu sync.Mutex
	closed   atomic.Bool
}

// New returns a Ledger. It does not dial Redis and starts no goroutine; call
// Run for replays.
func New(rdb redis.UniversalClient, opts Options) *Ledger {
	if opts.DedupeTTL <= 0 {
		opts.DedupeTTL = 72 * time.Hour
	}
	if opts.Retention <= 0 {
		opts.Retention = 400 * 24 * time.Hour
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 500 * time.Millisecond
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 250 * time.Millisecond
	}
	if opts.ReplayBatch <= 0 {
		opts.ReplayBatch = 64
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "ledger")
	m := newMetrics(opts.Registerer)
	l := &Ledger{
		rdb:  rdb,
		opts: opts,
		log:  log,
		m:    m,
		wake: make(chan struct{}, 1),
	}
	l.buf = newBuffer(opts.Buffer, opts.SpillFile, log, m)
	l.healthy.Store(true)
	return l
}

// Record writes one entry: one script round trip while Redis is healthy,
// else straight into the buffer. The caller's cancellation does not abort
// the write (a client disconnect must still be billed). It returns an error
// only for an entry that cannot be recorded at all.
func (l *Ledger) Record(ctx context.Context, e Entry) error {
	if e.Tenant == "" {
		return errors.New("ledger: entry without tenant")
	}
	if e.RequestID == "" {
		// Without an id a duplicate cannot be detected; count it once
		// rather than lose it.
		e.RequestID = "gen-" + randomID()
		l.log.Warn("ledger entry without request id; generated one", "tenant", e.Tenant, "request_id", e.RequestID)
	}
	if e.Time.IsZero() {
		e.Time = l.opts.Now()
	}
	e.Time = e.Time.UTC()
	e.Labels = BoundLabels(e.Labels)
	if !l.healthy.Load() {
		l.enqueue(e)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.WriteTimeout)
	defer cancel()
	keys, args := scriptArgs(&e, l.opts)
	res, err := recordScript.Run(ctx, l.rdb, keys, args...).Slice()
	if err != nil {
		l.m.errors.Inc()
		l.healthy.Store(false)
		l.log.Error("ledger write failed; buffering", "tenant", e.Tenant, "request_id", e.RequestID, "err", err)
		l.enqueue(e)
		return nil
	}
	l.written(ctx, &e, res)
	return nil
}

func (l *Ledger) enqueue(e Entry) {
	if l.closed.Load() {
		// No replay loop any more: keep it on disk (or count it dropped).
		_ = l.buf.overflow([]Entry{e})
		return
	}
	l.buf.push(e)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *Ledger) written(ctx context.Context, e *Entry, res []any) {
	r, err := parseResult(res)
	if err != nil {
		l.log.Error("ledger: unexpected script reply", "err", err)
	}
	if r.Duplicate {
		l.m.duplicates.Inc()
	} else {
		l.m.writes.Inc()
	}
	if l.opts.AfterWrite != nil {
		l.opts.AfterWrite(ctx, e, r)
	}
}

func parseResult(res []any) (Result, error) {
	if len(res) != 2 {
		return Result{}, fmt.Errorf("ledger: script returned %d values", len(res))
	}
	n, _ := res[0].(int64)
	s, _ := res[1].(string)
	cost, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return Result{Duplicate: n == 0}, fmt.Errorf("ledger: month cost %q: %w", s, err)
	}
	return Result{Duplicate: n == 0, MonthCost: pricing.Money(cost)}, nil
}

func scriptArgs(e *Entry, o Options) ([]string, []any) {
	day := e.Time.Format("2006-01-02")
	month := day[:7]
	names := sortedNames(e.Labels)
	scoped := len(names)
	if e.VirtualKeyID != "" {
		scoped++
	}
	keys := make([]string, 3, 3+4*scoped)
	keys[0] = seenKey(o.KeyPrefix, e.Tenant, e.RequestID)
	keys[1] = MonthKey(o.KeyPrefix, e.Tenant, month)
	keys[2] = DayKey(o.KeyPrefix, e.Tenant, day)
	u := e.Usage
	total := u.TotalTokens
	if total == 0 {
		total = u.PromptTokens + u.CompletionTokens
	}
	args := make([]any, 14, 14+scoped)
	args[0], args[1], args[2] = int64(o.DedupeTTL/time.Second), int64(o.Retention/time.Second), dims(e)
	args[3], args[4], args[5], args[6], args[7] = "1", u.PromptTokens, u.CompletionTokens, u.CachedTokens, u.ReasoningTokens
	args[8], args[9], args[10], args[11] = int64(e.Cost), b2i(e.Streamed), b2i(e.Partial), total
	args[12], args[13] = e.detail(), int64(3*scoped)
	// The script compares against '0' strings; go-redis sends ints as
	// decimal text, so 0 arrives as "0".
	if e.VirtualKeyID != "" {
		keys = append(keys, KeyScopeKey(o.KeyPrefix, e.Tenant, periodDay+day, e.VirtualKeyID),
			KeyScopeKey(o.KeyPrefix, e.Tenant, periodMonth+month, e.VirtualKeyID),
			KeyScopeKey(o.KeyPrefix, e.Tenant, periodAll, e.VirtualKeyID))
	}
	for _, n := range names {
		l := Label{Name: n, Value: e.Labels[n]}
		keys = append(keys, LabelScopeKey(o.KeyPrefix, e.Tenant, periodDay+day, l),
			LabelScopeKey(o.KeyPrefix, e.Tenant, periodMonth+month, l),
			LabelScopeKey(o.KeyPrefix, e.Tenant, periodAll, l))
	}
	if e.VirtualKeyID != "" {
		keys = append(keys, keyRankKey(o.KeyPrefix, e.Tenant, month))
		args = append(args, e.VirtualKeyID)
	}
	for _, n := range names {
		keys = append(keys, labelRankKey(o.KeyPrefix, e.Tenant, month, n))
		args = append(args, e.Labels[n])
	}
	return keys, args
}

// Run replays buffered and spilled entries until ctx ends. Call it once, in
// its own goroutine, for the life of the process.
func (l *Ledger) Run(ctx context.Context) {
	t := time.NewTicker(l.opts.RetryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.wake:
			// A fresh failure: give Redis the retry interval before
			// hammering it.
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		l.replayOnce(ctx)
	}
}

// Pending reports how many entries wait in memory and whether a spill file
// holds more.
func (l *Ledger) Pending() (buffered int, spilled bool) {
	return l.buf.len(), l.buf.hasSpill()
}

// replayOnce drains what it can; it stops at the first Redis failure.
func (l *Ledger) replayOnce(ctx context.Context) bool {
	l.replayMu.Lock()
	defer l.replayMu.Unlock()
	if l.buf.len() == 0 && !l.buf.hasSpill() {
		if !l.healthy.Load() {
			pctx, cancel := context.WithTimeout(ctx, l.opts.WriteTimeout)
			err := l.rdb.Ping(pctx).Err()
			cancel()
			if err == nil {
				l.healthy.Store(true)
				l.log.Info("ledger: redis reachable again")
			}
		}
		return true
	}
	for {
		batch := l.buf.pop(l.opts.ReplayBatch)
		if len(batch) == 0 {
			break
		}
		if failed, err := l.writeBatch(ctx, batch); err != nil {
			l.buf.pushFront(failed)
			l.healthy.Store(false)
			l.log.Warn("ledger replay failed; will retry", "pending", l.buf.len(), "err", err)
			return false
		}
		l.healthy.Store(true)
	}
	writeAll := func(batch []Entry) error {
		_, err := l.writeBatch(ctx, batch)
		return err
	}
	if err := l.buf.replaySpill(writeAll, l.opts.ReplayBatch); err != nil {
		l.healthy.Store(false)
		l.log.Warn("ledger spill replay failed; will retry", "err", err)
		return false
	}
	return true
}

// writeBatch writes entries in one pipeline. Entries whose command failed
// (a connection lost mid-pipeline, a server error) are returned for a later
// retry; idempotency makes retrying one that did land safe.
func (l *Ledger) writeBatch(ctx context.Context, batch []Entry) ([]Entry, error) {
	// Replay is off the data path: allow a busy Redis more than one write.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(2*time.Second, l.opts.WriteTimeout+time.Duration(len(batch))*5*time.Millisecond))
	defer cancel()
	loaded := false
	for {
		cmds, err := l.pipeline(ctx, batch)
		var failed, noScript []Entry
		for i, c := range cmds {
			res, cerr := c.(*redis.Cmd).Slice()
			switch {
			case cerr != nil && !loaded && redis.HasErrorPrefix(cerr, "NOSCRIPT"):
				noScript = append(noScript, batch[i])
			case cerr != nil:
				failed = append(failed, batch[i])
			default:
				// Reported now even when others in the batch go round
				// again: resent, a landed entry would come back as a
				// duplicate and its write would never be seen.
				l.written(ctx, &batch[i], res)
				l.m.replayed.Inc()
			}
		}
		if len(cmds) == 0 && err != nil {
			failed = batch
		}
		if len(noScript) > 0 {
			// A restarted Redis (or one cluster node of several) has
			// lost the script cache; another replica may have loaded it
			// again halfway through this pipeline.
			if lerr := recordScript.Load(ctx, l.rdb).Err(); lerr != nil {
				failed = append(failed, noScript...)
				err = fmt.Errorf("loading script: %w", lerr)
			} else if len(failed) == 0 {
				batch, loaded = noScript, true
				continue
			} else {
				failed = append(failed, noScript...)
			}
		}
		if len(failed) > 0 {
			l.m.errors.Inc()
			if err == nil {
				err = errors.New("some commands failed")
			}
			return failed, fmt.Errorf("ledger: replay pipeline (%d of %d failed): %w", len(failed), len(batch), err)
		}
		return nil, nil
	}
}

func (l *Ledger) pipeline(ctx context.Context, batch []Entry) ([]redis.Cmder, error) {
	return l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range batch {
			keys, args := scriptArgs(&batch[i], l.opts)
			recordScript.EvalSha(ctx, p, keys, args...)
		}
		return nil
	})
}

// Close flushes what is buffered within ctx; what Redis still does not take
// goes to the spill file, or, without one, is dropped and counted. Records
// after Close still write to Redis directly; one that cannot goes straight
// to the spill file (or is dropped, counted, without one).
func (l *Ledger) Close(ctx context.Context) error {
	l.closed.Store(true)
	for l.buf.len() > 0 || l.buf.hasSpill() {
		if l.replayOnce(ctx) {
			break
		}
		select {
		case <-ctx.Done():
			n := l.buf.len()
			if n == 0 {
				return nil
			}
			if err := l.buf.spillAll(); err != nil {
				return fmt.Errorf("ledger: %d entries not written: %w", n, err)
			}
			return nil
		case <-time.After(l.opts.RetryInterval):
		}
	}
	return nil
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
