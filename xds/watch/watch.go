// Package watch reloads the config file when it changes and hands each valid
// config to a callback. Editors save by writing a temporary file and
// renaming it over the original (vim, most IDEs), and Kubernetes swaps a
// ConfigMap's ..data symlink, so the directory is watched, not the file.
package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Options configure Run.
type Options struct {
	Load       config.Options
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Debounce coalesces the burst of events one save produces. Default 100ms.
	Debounce time.Duration
	// Serving: the caller already serves a config it loaded from the
	// file. A first load that fails (the file caught mid-save: truncated,
	// half written) then keeps it, logged and counted like any rejected
	// change, instead of ending Run: the save's next write is applied.
	Serving bool
}

// Run loads path, calls apply, then calls it again for every change until ctx
// is done. A config that fails to load or that apply refuses is logged and
// counted, and the previous one stays in force. The first load's error is
// returned (nothing to serve yet) unless Options.Serving.
func Run(ctx context.Context, path string, apply func(*config.Config) error, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	log := opts.Logger.With("path", path)
	m := newMetrics(opts.Registerer)
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching config: %w", err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(abs)); err != nil {
		return fmt.Errorf("watching %s: %w", filepath.Dir(abs), err)
	}

	last, err := fingerprint(abs)
	if err != nil && !opts.Serving {
		return fmt.Errorf("reading config: %w", err)
	}
	if err := reload(abs, apply, opts.Load, log, m); err != nil && !opts.Serving {
		return err
	}

	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("config watcher closed")
			}
			log.Warn("config watcher error", "err", err)
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("config watcher closed")
			}
			if !relevant(ev, abs) {
				continue
			}
			if timer == nil {
				timer = time.NewTimer(opts.Debounce)
			} else {
				timer.Reset(opts.Debounce)
			}
			fire = timer.C
		case <-fire:
			fire = nil
			fp, err := fingerprint(abs)
			if err != nil {
				// Mid-rename or deleted: wait for the next event.
				log.Warn("config file unreadable; keeping the current config", "err", err)
				continue
			}
			if fp == last {
				continue // touched, not changed
			}
			last = fp
			_ = reload(abs, apply, opts.Load, log, m)
		}
	}
}

// relevant: events on the file itself, or on anything in its directory that
// can replace it (rename targets, the ..data symlink of a ConfigMap).
func relevant(ev fsnotify.Event, abs string) bool {
	if ev.Has(fsnotify.Chmod) && !ev.Has(fsnotify.Write) {
		return false
	}
	name := filepath.Clean(ev.Name)
	if name == abs {
		return true
	}
	base := filepath.Base(name)
	return base == "..data" || (len(base) > 2 && base[:2] == "..")
}

func reload(path string, apply func(*config.Config) error, load config.Options, log *slog.Logger, m *metrics) error {
	cfg, err := config.Load(path, load)
	if err != nil {
		m.rejected.Inc()
		log.Error("config rejected; keeping the current config", "err", err)
		return err
	}
	if err := apply(cfg); err != nil {
		m.rejected.Inc()
		log.Error("config not applied; keeping the current config", "err", err)
		return err
	}
	m.reloads.Inc()
	log.Info("config loaded")
	return nil
}

// fingerprint is the file's content (resolved through symlinks); configs
// are small, and comparing content ignores saves that change nothing.
func fingerprint(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}
