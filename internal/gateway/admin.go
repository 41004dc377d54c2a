package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/reserve"
	"github.com/swarmgate/swarmgate/internal/admin"
	"github.com/swarmgate/swarmgate/internal/admission"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/keypool"
	"github.com/swarmgate/swarmgate/internal/subkey"
	rlservice "github.com/swarmgate/swarmgate/ratelimit/service"
)

// adminRole serves the admin HTTP API (metrics, health, status page,
// usage) on listen.admin, reading the other roles of this process; an
// endpoint whose role does not run here answers 503.
type adminRole struct {
	srv *admin.Server
	lis net.Listener
}

func (a *adminRole) Run(ctx context.Context) error { return a.srv.Run(ctx, a.lis) }

// startAdmin starts the admin server; pools, ep and rls are nil when this
// process does not run them.
func (g *Gateway) startAdmin(s *group, p *process, pools *keypool.Pools, ep *extProcRole, rls *rlservice.Service) error {
	opts := admin.Options{
		Logger: g.log.With("component", "admin"), Gatherer: p.reg, Config: g.Config, Access: p.cfg.Admin,
		Ready: []admin.ReadyCheck{admin.RedisCheckLive(p.rdb, g.Config)}, Version: g.opts.Version,
	}
	if pools != nil {
		opts.Keys = keySource(pools)
	}
	if rls != nil {
		opts.Ready = append(opts.Ready, rateLimitConfigLoaded(rls))
	}
	if ep != nil && ep.subkeys != nil {
		opts.SubKeys = ep.subkeys
		opts.Ready = append(opts.Ready, subkeysLoaded(ep.subkeys, admin.RedisCheckLive(p.rdb, g.Config).Policy))
	}
	if ep != nil {
		opts.Refusals = ep.refusals
		opts.Usage = ep.acct.ledger.Handler(g.Config) // the config in force: reloads add tenants
		opts.Budgets = budgetSource(g.Config, ep.acct.ledger)
		opts.Queue = queueSource(ep.queue)
		opts.BudgetLeft = budgetLeft{ep.acct.reserve}
	}
	srv := admin.New(opts)
	lis, err := bind(g.opts.Listeners.Admin, p.cfg.Listen.Admin, "listen.admin")
	if err != nil {
		return err
	}
	s.start(&adminRole{srv, lis})
	return nil
}

// subkeysLoaded reports the replica's first full load of the sub-keys:
// before it, every sub-key is refused as unknown (config keys are served).
// It makes the replica unready exactly when Redis's own check does (some
// use of Redis is fail-closed); with every use fail-open a replica that
// could not load them stays in rotation, degraded, for the config's keys.
func subkeysLoaded(store *subkey.Store, redisPolicy func() (bool, string)) admin.ReadyCheck {
	return admin.ReadyCheck{
		Name: "subkeys",
		Policy: func() (bool, string) {
			required, why := redisPolicy()
			return required, "sub-keys are refused as unknown until the first load; " + why
		},
		Check: func(context.Context) error {
			select {
			case <-store.Synced():
				return nil
			default:
				return errors.New("sub-keys not loaded from Redis yet")
			}
		},
	}
}

// keySource reports every key's state for /keys and the status page.
func keySource(pools *keypool.Pools) admin.KeySource {
	return admin.KeySourceFunc(func(context.Context) ([]admin.KeyState, error) {
		snap := pools.Snapshot()
		out := make([]admin.KeyState, len(snap))
		for i, k := range snap {
			out[i] = admin.KeyState(k)
		}
		return out, nil
	})
}

// budgetSource reports each budgeted tenant's spend this month from the
// ledger, for /budgets and the status page.
func budgetSource(cfg func() *config.Config, led *ledger.Ledger) admin.BudgetSource {
	return admin.BudgetSourceFunc(func(ctx context.Context) ([]admin.BudgetState, error) {
		c := cfg()
		month := ledger.MonthOf(time.Now())
		var out []admin.BudgetState
		for _, t := range c.Tenants {
			if t.Budget == nil {
				continue
			}
			spent, err := led.MonthCost(ctx, t.Name, month)
			if err != nil {
				return nil, fmt.Errorf("budget of %s: %w", t.Name, err)
			}
			out = append(out, admin.BudgetState{Tenant: t.Name, Period: month, Spent: spent.Float(),
				Limit: t.Budget.Monthly, Currency: c.Accounting.Currency, HardCap: t.Budget.HardCap})
		}
		return out, nil
	})
}

// queueSource reports this replica's admission queue for /admission and
// the status page.
func queueSource(q *admission.Queue) admin.QueueSource {
	return admin.QueueSourceFunc(func(context.Context) (admin.QueueState, error) {
		snap := q.Snapshot()
		out := admin.QueueState{Waiting: snap.Waiting, MaxQueue: snap.MaxQueue,
			Scopes: make([]admin.QueueScope, len(snap.Scopes)), Counters: admin.QueueCounters(snap.Counters)}
		for i, s := range snap.Scopes {
			ws := make([]admin.QueueWaiters, len(s.Waiters))
			for j, w := range s.Waiters {
				ws[j] = admin.QueueWaiters(w)
			}
			out.Scopes[i] = admin.QueueScope{Scope: s.Scope, Depth: s.Depth, Waiters: ws,
				OldestWaitSeconds: s.OldestWait.Seconds()}
		}
		return out, nil
	})
}

// budgetLeft is the key API's view of what remains of a parent's and its
// tenant's budgets, in currency units.
type budgetLeft struct{ r *reserve.Reserver }

func (b budgetLeft) Left(ctx context.Context, tenant, parent string) (float64, bool, error) {
	left, ok, err := b.r.Left(ctx, tenant, parent)
	return left.Float(), ok, err
}
