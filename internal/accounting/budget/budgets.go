package budget

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/config"
)

// Options configure Budgets. Zero values take the defaults.
type Options struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// HTTPClient posts webhooks (default: a client with no overall
	// timeout; each attempt is bounded by alerts.timeout).
	HTTPClient *http.Client
	// WebhookAttempts is how often a failing webhook is tried (default 3),
	// RetryBackoff the first pause between attempts, doubling (250ms).
	WebhookAttempts int
	RetryBackoff    time.Duration
	// QueueSize bounds alerts waiting for delivery (default 1024).
	QueueSize int
	Now       func() time.Time
}

// Budgets checks hard caps and fires threshold alerts.
type Budgets struct {
	rdb  redis.UniversalClient
	cfg  atomic.Pointer[config.Config]
	opts Options
	log  *slog.Logger
	m    *metrics

	// known holds alert keys this replica has seen claimed (by anyone), so
	// the data path asks Redis at most once per crossing. Each is
	// forgotten after a while (Run sweeps), so the map stays bounded: a
	// month's or day's after its window, a run's (which never ends) after
	// runMemory. A later repeat costs one claim that the claim in Redis
	// stops.
	known sync.Map
	queue chan Alert
	// inflight counts alerts queued or being claimed and delivered.
	inflight atomic.Int64
}

// New returns Budgets for cfg. Call Run to deliver alerts.
func New(rdb redis.UniversalClient, cfg *config.Config, opts Options) *Budgets {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{}
	}
	if opts.WebhookAttempts <= 0 {
		opts.WebhookAttempts = 3
	}
	if opts.RetryBackoff <= 0 {
		opts.RetryBackoff = 250 * time.Millisecond
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = 1024
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	b := &Budgets{
		rdb:   rdb,
		opts:  opts,
		log:   opts.Logger.With("component", "budget"),
		m:     newMetrics(opts.Registerer),
		queue: make(chan Alert, opts.QueueSize),
	}
	b.SetConfig(cfg)
	return b
}

// SetConfig swaps the configuration (hot reload).
func (b *Budgets) SetConfig(cfg *config.Config) {
	b.cfg.Store(cfg)
	for i := range cfg.Tenants {
		if t := &cfg.Tenants[i]; t.Budget != nil {
			b.m.limit.WithLabelValues(t.Name).Set(t.Budget.Monthly)
		}
	}
}

// Check refuses a request when the tenant's hard cap is already reached.
// It is the admission check when reservations are not used
// (accounting.token_limits: ratelimit); requests in flight at that moment
// finish and are counted, so spend can pass the cap by their cost.
func (b *Budgets) Check(ctx context.Context, tenant string) error {
	cfg := b.cfg.Load()
	t, ok := cfg.Tenant(tenant)
	if !ok || t.Budget == nil || !t.Budget.HardCap {
		return nil
	}
	now := b.opts.Now()
	month := ledger.MonthOf(now)
	spent, err := b.rdb.HGet(ctx, ledger.MonthKey(cfg.Redis.KeyPrefix, tenant, month), ledger.TotalCostField).Int64()
	if err == redis.Nil {
		spent, err = 0, nil
	}
	if err != nil {
		mode := cfg.FailureModes.Budget
		b.m.storeFailures.WithLabelValues(string(mode)).Inc()
		b.log.Warn("budget check: redis unavailable", "tenant", tenant, "failure_mode", mode, "err", err)
		if mode == config.FailClosed {
			return fmt.Errorf("budget: tenant %q: %w: %w", tenant, ErrUnavailable, err)
		}
		return nil
	}
	limit := pricing.FromFloat(t.Budget.Monthly)
	b.m.spend.WithLabelValues(tenant).Set(pricing.Money(spent).Float())
	if pricing.Money(spent) >= limit {
		b.m.refused.WithLabelValues(tenant).Inc()
		return &ExceededError{Tenant: tenant, Budget: "monthly", Month: month,
			Spent: pricing.Money(spent), Cap: limit, RetryAfter: UntilNextMonth(now)}
	}
	return nil
}

// AfterWrite is the ledger hook (ledger.Options.AfterWrite): it observes
// the month spend every write returns.
func (b *Budgets) AfterWrite(ctx context.Context, e *ledger.Entry, r ledger.Result) {
	b.Observe(ctx, e.Tenant, ledger.MonthOf(e.Time), r.MonthCost)
}

// Observe updates the spend gauge and queues a claim for every threshold
// the spend has reached that this replica has not seen claimed. It never
// blocks: the Redis claim and the webhook happen in Run.
func (b *Budgets) Observe(_ context.Context, tenant, month string, spent pricing.Money) {
	cfg := b.cfg.Load()
	t, ok := cfg.Tenant(tenant)
	if !ok || t.Budget == nil {
		return
	}
	now := b.opts.Now()
	if month == ledger.MonthOf(now) {
		b.m.spend.WithLabelValues(tenant).Set(spent.Float())
	}
	for _, pct := range thresholds(t.Budget) {
		at := pricing.FromFloat(t.Budget.Monthly * pct / 100)
		if spent < at {
			break
		}
		a := Alert{Type: "budget_threshold", Tenant: tenant, Month: month, ThresholdPercent: pct,
			Spent: spent, Budget: pricing.FromFloat(t.Budget.Monthly), Currency: cfg.Accounting.Currency,
			HardCap: t.Budget.HardCap && pct >= 100, forget: windowEnd("month", now)}
		b.enqueue(a)
	}
}

// enqueue queues a claim for a unless this replica has seen it claimed.
func (b *Budgets) enqueue(a Alert) {
	var v any = claiming
	if !a.forget.IsZero() {
		v = a.forget
	}
	if _, seen := b.known.LoadOrStore(a.key(), v); seen {
		return
	}
	// Counted before it is queued and until it is delivered: Pending is
	// never 0 while an alert is between the queue and Run.
	b.inflight.Add(1)
	select {
	case b.queue <- a:
	default:
		b.inflight.Add(-1)
		b.known.Delete(a.key())
		b.m.alertsDropped.Inc()
		b.log.Error("budget alert queue full; alert will be retried on the next write", "tenant", a.Tenant, "key_id", a.KeyID, "threshold_percent", a.ThresholdPercent)
	}
}

// thresholds are the configured alert percentages plus 100 for a hard cap.
func thresholds(bg *config.Budget) []float64 {
	th := bg.Alerts
	if bg.HardCap && !slices.Contains(th, 100) {
		th = append(slices.Clone(th), 100)
	}
	return th
}

const claiming = 0

func (a *Alert) key() string {
	return a.Tenant + "|" + a.KeyID + "|" + a.Month + "|" + strconv.FormatFloat(a.ThresholdPercent, 'f', -1, 64)
}

// Run claims queued alerts in Redis and delivers the ones this replica won,
// until ctx ends.
func (b *Budgets) Run(ctx context.Context) {
	sweep := time.NewTicker(time.Hour)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			b.forgetPast(b.opts.Now())
		case a := <-b.queue:
			b.claimAndFire(ctx, a)
			b.inflight.Add(-1)
		}
	}
}

// Pending counts alerts queued or being claimed and delivered.
func (b *Budgets) Pending() int { return int(b.inflight.Load()) }

// forgetPast drops the known alerts whose time to be forgotten has come.
func (b *Budgets) forgetPast(now time.Time) {
	b.known.Range(func(k, v any) bool {
		if t, ok := v.(time.Time); ok && now.After(t) {
			b.known.Delete(k)
		}
		return true
	})
}

// alertTTL outlives the month the alert belongs to.
const alertTTL = 40 * 24 * time.Hour

func (b *Budgets) claimAndFire(ctx context.Context, a Alert) {
	cfg := b.cfg.Load()
	key := ledger.TenantKey(cfg.Redis.KeyPrefix, a.Tenant, a.claimKey())
	cctx, cancel := context.WithTimeout(ctx, cfg.Redis.ReadTimeout.D()+time.Second)
	won, err := b.claim(cctx, key, a)
	cancel()
	if err != nil {
		// Unclaimed: the next write that sees the spend queues it again.
		b.known.Delete(a.key())
		b.log.Warn("budget alert claim failed; will retry", "tenant", a.Tenant, "threshold_percent", a.ThresholdPercent, "err", err)
		return
	}
	if !won {
		return // another replica fired it
	}
	a.Time = b.opts.Now().UTC()
	counter, threshold := b.m.alerts, strconv.FormatFloat(a.ThresholdPercent, 'f', -1, 64)
	if a.KeyID != "" {
		// A minter (an agent, not the operator) chooses a key's
		// thresholds: whole percents keep the series bounded (80.0001,
		// 80.0002… would each be a new one).
		counter, threshold = b.m.keyAlerts, keyThresholdLabel(a.ThresholdPercent)
	}
	counter.WithLabelValues(a.Tenant, threshold).Inc()
	b.log.Warn("budget threshold reached", "tenant", a.Tenant, "key_id", a.KeyID, "period", a.Period, "month", a.Month,
		"threshold_percent", a.ThresholdPercent, "spent", a.Spent.String(), "budget", a.Budget.String(),
		"currency", a.Currency, "hard_cap", a.HardCap)
	if cfg.Alerts.WebhookURL != "" {
		b.post(ctx, cfg.Alerts, a)
	}
}

// claim sets the alert's claim unless it is set. A run's claim never
// expires, as the run's spend counter does not: an expired claim would let
// a replica fire every threshold the counter passed again. PERSIST in the
// same round trip also removes the 40-day TTL claims were set with before.
func (b *Budgets) claim(ctx context.Context, key string, a Alert) (bool, error) {
	at := b.opts.Now().UTC().Format(time.RFC3339)
	if !a.run() {
		return b.rdb.SetNX(ctx, key, at, alertTTL).Result()
	}
	var set *redis.BoolCmd
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		set = p.SetNX(ctx, key, at, 0)
		p.Persist(ctx, key)
		return nil
	})
	if err != nil {
		return false, err
	}
	return set.Val(), nil
}

// keyThresholdLabel is a key alert's threshold as a metric label: the whole
// percent at or below it, 1 to 100.
func keyThresholdLabel(pct float64) string {
	return strconv.Itoa(min(max(int(pct), 1), 100))
}
