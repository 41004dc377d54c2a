package gateway

import (
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

// DefaultRetireAfter is how long a backend a reload removed stays known to
// ext_proc after the traffic has been moved off it.
const DefaultRetireAfter = 30 * time.Second

// retirer applies file reloads that remove backends in two steps. Envoy
// gets the new routes and endpoints a moment after ext_proc gets the new
// config (and a fleet much later), so attempts still arrive for a removed
// backend; an ext_proc that no longer knows it can only refuse them (503
// gateway_not_admitted). So the reload is applied first with the removed
// backends kept but targeted by no model: Envoy moves the traffic, ext_proc
// still serves the attempts in flight. After RetireAfter the config as
// written is applied. A newer reload cancels a pending second step.
type retirer struct {
	mu    sync.Mutex
	gen   uint64
	timer *time.Timer
}

// applyFromFile is the file watch's apply.
func (g *Gateway) applyFromFile(c *config.Config) error {
	g.retire.mu.Lock()
	defer g.retire.mu.Unlock()
	g.retire.gen++
	if g.retire.timer != nil {
		g.retire.timer.Stop()
		g.retire.timer = nil
	}
	interim, err := retiring(g.cfg.Load(), c, g.fileLoad())
	if err != nil || interim == nil {
		if err != nil {
			g.log.Warn("a reload removing backends is applied at once: the interim config did not validate", "err", err)
		}
		return g.apply(c)
	}
	if err := g.apply(interim); err != nil {
		return err
	}
	after := g.opts.RetireAfter
	if after <= 0 {
		after = DefaultRetireAfter
	}
	gen := g.retire.gen
	g.log.Info("backends removed from routing; ext_proc keeps them for attempts in flight", "backends", retiredNames(interim, c), "for", after)
	g.retire.timer = time.AfterFunc(after, func() {
		g.retire.mu.Lock()
		defer g.retire.mu.Unlock()
		if gen != g.retire.gen {
			return // a newer reload took over
		}
		g.retire.timer = nil
		if err := g.apply(c); err != nil {
			g.log.Error("removing retired backends", "err", err)
		}
	})
	return nil
}

// fileLoad is how a config from the watched file is prepared again: its
// relative paths (TLS files, file: secrets) resolve from the file's
// directory, as config.Load resolved them, not from the working directory.
func (g *Gateway) fileLoad() config.Options {
	o := g.opts.Load
	if o.BaseDir == "" && g.opts.ConfigPath != "" {
		o.BaseDir = filepath.Dir(g.opts.ConfigPath)
	}
	return o
}

// stopRetiring cancels a pending second step when Run ends.
func (g *Gateway) stopRetiring() {
	g.retire.mu.Lock()
	defer g.retire.mu.Unlock()
	g.retire.gen++
	if g.retire.timer != nil {
		g.retire.timer.Stop()
		g.retire.timer = nil
	}
}

// retiring is next with the backends of prev it removes added back (their
// targets stay removed), or nil when it removes none.
func retiring(prev, next *config.Config, load config.Options) (*config.Config, error) {
	if prev == nil {
		return nil, nil
	}
	var kept []config.Backend
	for _, b := range prev.Backends {
		if _, ok := next.Backend(b.Name); !ok {
			kept = append(kept, b)
		}
	}
	if len(kept) == 0 {
		return nil, nil
	}
	interim := *next
	interim.Backends = append(slices.Clip(next.Backends), kept...)
	if err := interim.Prepare(load); err != nil {
		return nil, err
	}
	return &interim, nil
}

func retiredNames(interim, final *config.Config) []string {
	var names []string
	for _, b := range interim.Backends {
		if _, ok := final.Backend(b.Name); !ok {
			names = append(names, b.Name)
		}
	}
	return names
}
