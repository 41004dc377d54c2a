package gateway

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/accounting/budget"
	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/reserve"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/subkey"
)

// accounting is ext_proc's bookkeeping: the budgets' spend cache, the
// ledger's write queue and the token reservations. On shutdown the ledger
// and the reservations get 5 s to write what they hold.
type accounting struct {
	budgets *budget.Budgets
	ledger  *ledger.Ledger
	reserve *reserve.Reserver
	log     *slog.Logger
}

func (g *Gateway) startAccounting(s *group, p *process, keys *subkey.Store) *accounting {
	a := &accounting{log: g.log}
	a.budgets = budget.New(p.rdb, p.cfg, budget.Options{Logger: g.log.With("component", "budget"), Registerer: p.reg})
	g.onConfig(func(c *config.Config) error { a.budgets.SetConfig(c); return nil })
	lopts := ledger.OptionsFrom(p.cfg)
	lopts.Logger, lopts.Registerer, lopts.AfterWrite = g.log.With("component", "ledger"), p.reg, a.budgets.AfterWrite
	a.ledger = ledger.New(p.rdb, lopts)
	a.reserve = reserve.New(p.rdb, p.cfg, reserve.Options{Logger: g.log.With("component", "reserve"), Registerer: p.reg,
		LedgerDrained: func() bool { n, spilled := a.ledger.Pending(); return n == 0 && !spilled },
		Keys:          wire.KeyBudgets(keys), ObserveKey: a.budgets.ObserveKey})
	g.onConfig(func(c *config.Config) error { a.reserve.SetConfig(c); return nil })
	s.start(a)
	return a
}

func (a *accounting) Run(ctx context.Context) error {
	var grp errgroup.Group
	grp.Go(func() error { a.budgets.Run(ctx); return nil })
	grp.Go(func() error {
		a.ledger.Run(ctx)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return a.ledger.Close(cctx)
	})
	grp.Go(func() error {
		a.reserve.Run(ctx)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		// Settles left over only keep their holds until the TTL.
		if err := a.reserve.Close(cctx); err != nil {
			a.log.Warn("reserve: closing", "err", err)
		}
		return nil
	})
	return grp.Wait()
}
