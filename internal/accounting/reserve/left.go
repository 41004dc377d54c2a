package reserve

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
)

// Left is what remains, in this period, of the budgets a key minted by
// keyID ("" for the admin's keys) would count toward: keyID's and every
// budget above it, and the tenant's. Spent money and holds in flight both
// count as used. ok is false when none of them has a budget. A new key's
// budget is carved out of it (the key API refuses a larger one).
func (r *Reserver) Left(ctx context.Context, tenant, keyID string) (left pricing.Money, ok bool, err error) {
	cfg := r.cfg.Load()
	t, found := cfg.Tenant(tenant)
	if !found {
		return 0, false, fmt.Errorf("reserve: unknown tenant %q", tenant)
	}
	now := r.opts.Now()
	prefix := cfg.Redis.KeyPrefix
	type level struct {
		cap         pricing.Money
		spent, held *redis.StringCmd
	}
	var levels []level
	ctx, cancel := context.WithTimeout(ctx, cfg.Redis.ReadTimeout.D())
	defer cancel()
	_, err = r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, h := range keyHolds(r.opts.Keys, tenant, keyID, now) {
			_, hh, spend := keyScopeKeys(prefix, tenant, h)
			levels = append(levels, level{h.Cap, p.Get(ctx, spend), p.HGet(ctx, hh, "_sum")})
		}
		if b := t.Budget; b != nil {
			month := ledger.MonthOf(now)
			_, hh := r.scopeKeys(prefix, tenant, ScopeBudget, "", "", month)
			levels = append(levels, level{pricing.FromFloat(b.Monthly),
				p.HGet(ctx, ledger.MonthKey(prefix, tenant, month), ledger.TotalCostField), p.HGet(ctx, hh, "_sum")})
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, false, fmt.Errorf("reserve: budget left for tenant %q: %w", tenant, err)
	}
	// The pipeline's error is only its first command's: when that one is
	// redis.Nil (nothing spent yet), a later one's failure would otherwise
	// read as nothing used.
	for i, l := range levels {
		spent, err := counter(l.spent)
		if err != nil {
			return 0, false, fmt.Errorf("reserve: budget left for tenant %q: spend: %w", tenant, err)
		}
		held, err := counter(l.held)
		if err != nil {
			return 0, false, fmt.Errorf("reserve: budget left for tenant %q: holds: %w", tenant, err)
		}
		rest := max(l.cap-pricing.Money(spent+held), 0)
		if i == 0 || rest < left {
			left = rest
		}
	}
	return left, len(levels) > 0, nil
}

// counter reads an integer counter: absent (redis.Nil) is 0; a failed
// command (WRONGTYPE) or a value that is not an integer is an error.
func counter(c *redis.StringCmd) (int64, error) {
	v, err := c.Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, err
}
