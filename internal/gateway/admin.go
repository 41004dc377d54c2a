package gateway

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/admin"
	"github.com/swarmgate/swarmgate/internal/admission"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/keypool"
)

// adminRole serves the admin HTTP API (metrics, health, status page,
// usage) on listen.admin, reading the other roles of this process; an
// endpoint whose role does not run here answers 503.
type adminRole struct {
	srv *admin.Server
	lis net.Listener
}

func (a *adminRole) Run(ctx context.Context) error { return a.srv.Run(ctx, a.lis) }

// startAdmin starts the admin server; pools and ep are nil when this
// process does not run them.
func (g *Gateway) startAdmin(s *group, p *process, pools *keypool.Pools, ep *extProcRole) error {
	opts := admin.Options{
		Logger: g.log.With("component", "admin"), Gatherer: p.reg, Config: g.Config, Access: p.cfg.Admin,
		Ready: []admin.ReadyCheck{admin.RedisCheckLive(p.rdb, g.Config)}, Version: g.opts.Version,
	}
	if pools != nil {
		opts.Keys = keySource(pools)
	}
	opts.SubKeys = p.subKeys()
	if ep != nil {
		opts.Refusals = ep.refusals
		opts.Usage = ep.acct.ledger.Handler(g.Config) // the config in force: reloads add tenants
		opts.Budgets = budgetSource(g.Config, ep.acct.ledger)
		opts.Queue = queueSource(ep.queue)
	}
	srv := admin.New(opts)
	lis, err := bind(g.opts.Listeners.Admin, p.cfg.Listen.Admin, "listen.admin")
	if err != nil {
		return err
	}
	s.start(&adminRole{srv, lis})
	return nil
}

// subKeys is the sub-key store the key API (/v1/keys) writes through:
// the process's store when sub-keys are enabled. None is built yet, so
// the key API answers 501; the wiring returns the *subkey.Store it runs
// here (nil when disabled, never a typed nil).
func (p *process) subKeys() admin.SubKeyStore {
	return nil
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
