// Package watch reloads the config file when it changes and hands each valid
// config to a callback. Editors save by writing a temporary file and
// renaming it over the original (vim, most IDEs), and Kubernetes swaps a
// ConfigMap's ..data symlink, so the directory is watched, not the file.
// The files the config's file: secrets come from are watched the same way:
// a provider key rotated in place (a Secret volume) reloads the config.
package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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
	// Retry bounds the wait between attempts at a config that failed to
	// load (default 30s; the waits double from 1s, or from Retry when that
	// is shorter). What it lacked may appear without the file changing: a
	// file: secret whose Secret volume is updated after the ConfigMap, an
	// env: variable.
	Retry time.Duration
}

// Run loads path, calls apply, then calls it again for every change until ctx
// is done. A config that fails to load or that apply refuses is logged and
// counted, and the previous one stays in force; one that failed to load is
// tried again (Options.Retry) until it loads or the file changes. The first
// load's error is returned (nothing to serve yet) unless Options.Serving.
func Run(ctx context.Context, path string, apply func(*config.Config) error, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	if opts.Retry <= 0 {
		opts.Retry = 30 * time.Second
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

	l := &loader{path: abs, apply: apply, opts: opts.Load, log: log, m: m,
		firstWait: min(time.Second, opts.Retry), maxWait: opts.Retry}
	secrets := map[string]bool{} // the secret files of the config in force
	// follow watches the secret files of the config in force and reports
	// whether it watched a new directory.
	follow := func() (added bool) {
		if l.cfg == nil {
			return false
		}
		clear(secrets)
		for _, f := range l.cfg.SecretFiles() {
			// The file and, when it is a symlink, its target: written in
			// place there (a secrets agent's file linked into place).
			names := []string{f}
			if real, err := filepath.EvalSymlinks(f); err == nil && real != f {
				names = append(names, real)
			}
			for _, name := range names {
				secrets[name] = true
				// The watcher's own list: a directory removed and made
				// again (a secrets agent's) has lost its watch.
				if d := filepath.Dir(name); !slices.Contains(w.WatchList(), d) {
					if err := w.Add(d); err != nil {
						log.Warn("cannot watch a secret file's directory; its changes need a config edit", "dir", d, "err", err)
						continue
					}
					added = true
				}
			}
		}
		return added
	}
	var retry *time.Timer
	var retryC <-chan time.Time
	load := func() error {
		wait, err := l.load()
		// A secret written after the load read it and before its
		// directory was watched is seen by loading once more (a no-op
		// when nothing changed).
		for follow() {
			wait, err = l.load()
		}
		if retry != nil {
			retry.Stop()
		}
		retryC = nil
		if wait > 0 {
			retry = time.NewTimer(wait)
			retryC = retry.C
		}
		return err
	}
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	if err := load(); err != nil {
		if !opts.Serving {
			return err
		}
		if errors.Is(err, errUnreadable) {
			log.Warn("config file unreadable; keeping the current config", "err", err)
		}
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
			if !relevant(ev, abs, secrets) {
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
			if err := load(); errors.Is(err, errUnreadable) {
				// Mid-rename or deleted: wait for the next event.
				log.Warn("config file unreadable; keeping the current config", "err", err)
			}
		case <-retryC:
			_ = load()
		}
	}
}

// relevant: events on the file itself or a secret file, or on anything in a
// watched directory that can replace one (rename targets, the ..data
// symlink of a ConfigMap or Secret volume).
func relevant(ev fsnotify.Event, abs string, secrets map[string]bool) bool {
	if ev.Has(fsnotify.Chmod) && !ev.Has(fsnotify.Write) {
		return false
	}
	name := filepath.Clean(ev.Name)
	if name == abs || secrets[name] {
		return true
	}
	base := filepath.Base(name)
	return base == "..data" || (len(base) > 2 && base[:2] == "..")
}

var errUnreadable = errors.New("reading config")

// loader loads the file and remembers what came of it: only the content
// applied is skipped when a save changes nothing, and content that failed
// to load is tried again with a bounded backoff, logged again only when its
// error changes. Content apply refused is not retried: that verdict is the
// content's (the control plane's translation), not the environment's.
type loader struct {
	path               string
	apply              func(*config.Config) error
	opts               config.Options
	log                *slog.Logger
	m                  *metrics
	firstWait, maxWait time.Duration

	applied  *string        // content in force
	cfg      *config.Config // the config in force (its secret files)
	rejected *string        // content last rejected
	refused  bool           // by apply (else it failed to load)
	lastErr  string         // its last error
	wait     time.Duration
}

// load applies the file unless its content is in force or was refused, and
// returns how long to wait before trying again (0: not to).
func (l *loader) load() (time.Duration, error) {
	fp, err := fingerprint(l.path)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	if l.applied != nil && fp == *l.applied {
		if l.cfg == nil || !l.cfg.SecretFilesChanged() {
			l.rejected = nil // a rejected edit undone
			return 0, nil
		}
		l.log.Info("a secret file changed; reloading the config")
		// The content a refusal was recorded for is the same: the
		// secret is what changed, so this is no repeat of it.
		l.rejected = nil
	}
	again := l.rejected != nil && fp == *l.rejected
	if again && l.refused {
		return 0, nil // touched, not changed
	}
	cfg, err := config.Load(l.path, l.opts)
	refused := false
	if err == nil {
		err = l.apply(cfg)
		refused = err != nil
	}
	if err == nil {
		l.applied, l.rejected, l.cfg = &fp, nil, cfg
		l.m.reloads.Inc()
		l.log.Info("config loaded")
		return 0, nil
	}
	if !again {
		l.m.rejected.Inc() // once per content: a version of the file
		l.wait = 0
	}
	switch {
	case refused:
		l.log.Error("config not applied; keeping the current config", "err", err)
	case !again || err.Error() != l.lastErr:
		l.log.Error("config rejected; keeping the current config", "err", err)
	default:
		l.log.Debug("config still rejected", "err", err)
	}
	l.rejected, l.refused, l.lastErr = &fp, refused, err.Error()
	if refused {
		return 0, err
	}
	l.wait = min(max(2*l.wait, l.firstWait), l.maxWait)
	return l.wait, err
}

// fingerprint is the file's content (resolved through symlinks); configs
// are small, and comparing content ignores saves that change nothing.
func fingerprint(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}
