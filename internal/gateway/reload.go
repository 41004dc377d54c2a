package gateway

import (
	"fmt"
	"reflect"

	"github.com/swarmgate/swarmgate/internal/config"
)

// startOnly is a setting a role of this process reads once, when it
// starts: a reload that changes it is applied everywhere else, but not
// there until a restart. docs/config.md ("Settings read at start") lists
// them.
type startOnly struct {
	path string
	runs func(Roles) bool
	get  func(*config.Config) any
	// section is a whole section, named but not logged (it holds secrets).
	section bool
}

var (
	anyRole        = func(Roles) bool { return true }
	onControlPlane = func(r Roles) bool { return r.ControlPlane }
	onExtProc      = func(r Roles) bool { return r.ExtProc }
	onAdmin        = func(r Roles) bool { return r.Admin }
)

var startOnlySettings = []startOnly{
	{path: "listen.xds", runs: onControlPlane, get: func(c *config.Config) any { return c.Listen.XDS }},
	{path: "listen.admin", runs: onAdmin, get: func(c *config.Config) any { return c.Listen.Admin }},
	{path: "admin", runs: onAdmin, get: func(c *config.Config) any { return c.Admin }, section: true},
	{path: "redis", runs: anyRole, get: func(c *config.Config) any { return c.Redis }, section: true},
	{path: "subkeys.enabled", runs: onExtProc, get: func(c *config.Config) any { return c.Subkeys.Enabled }},
	{path: "subkeys.redis_prefix", runs: onExtProc, get: func(c *config.Config) any { return c.Subkeys.RedisPrefix }},
	{path: "subkeys.retention", runs: onExtProc, get: func(c *config.Config) any { return c.Subkeys.Retention }},
	{path: "admission.max_queue", runs: onExtProc, get: func(c *config.Config) any { return c.Admission.MaxQueue }},
	{path: "admission.poll", runs: onExtProc, get: func(c *config.Config) any { return c.Admission.Poll.D() }},
	{path: "admission.redis_timeout", runs: onExtProc, get: func(c *config.Config) any { return c.Admission.RedisTimeout.D() }},
	{path: "admission.session_idle", runs: onExtProc, get: func(c *config.Config) any { return c.Admission.SessionIdle.D() }},
	{path: "admission.session_span", runs: onExtProc, get: func(c *config.Config) any { return c.Admission.SessionSpan.D() }},
	{path: "admission.max_sessions", runs: onExtProc, get: func(c *config.Config) any { return c.Admission.MaxSessions }},
	{path: "failure_modes.admission_order", runs: onExtProc, get: func(c *config.Config) any { return c.FailureModes.AdmissionOrder }},
	{path: "accounting.ledger_buffer", runs: onExtProc, get: func(c *config.Config) any { return c.Accounting.LedgerBuffer }},
	{path: "accounting.spill_file", runs: onExtProc, get: func(c *config.Config) any { return c.Accounting.SpillFile }},
	{path: "telemetry.otlp_endpoint", runs: onExtProc, get: func(c *config.Config) any { return c.Telemetry.OTLPEndpoint }},
}

// guardReloads is registered once every role has added its appliers. The
// trace sample ratio follows every config. A reload of this process's own
// file that moves a listener Envoy is pointed at is refused, and one that
// changes another start-only setting is applied with a warning naming it.
// A replica's configs from xDS carry the control plane's listen addresses
// and start-only settings, which never apply to it (it keeps its own
// file's), so they are not compared.
func (g *Gateway) guardReloads(p *process) {
	g.onConfig(func(c *config.Config) error { p.sampler.SetRatio(c.Telemetry.SampleRatio); return nil })
	if g.opts.FromXDS {
		return
	}
	start := p.cfg
	// First of all: a refused config must reach no one, the control plane
	// included.
	g.onConfigFirst(func(c *config.Config) error { return movedListener(g.opts.Roles, start, c) })
	// Last: warn only about a config every applier took.
	g.onConfig(func(c *config.Config) error { g.warnStartOnly(start, g.cfg.Load(), c); return nil })
}

// movedListener refuses a config that moves the ext_proc or rate-limit
// listener of a role this process runs: the process keeps serving the
// socket it bound at start while the control plane would point Envoy's
// cluster at the new address, cutting all traffic.
func movedListener(roles Roles, start, next *config.Config) error {
	for _, l := range []struct {
		path     string
		runs     bool
		was, now string
	}{
		{"listen.extproc", roles.ExtProc, start.Listen.ExtProc, next.Listen.ExtProc},
		{"listen.ratelimit", roles.RateLimit, start.Listen.RateLimit, next.Listen.RateLimit},
	} {
		if l.runs && l.now != l.was {
			return fmt.Errorf("%s changed from %s to %s: needs a restart (this process keeps listening on %[2]s, and Envoy would be pointed at %[3]s)",
				l.path, l.was, l.now)
		}
	}
	return nil
}

// warnStartOnly logs each start-only setting of this process's roles that
// next changes: once per change (not again while it stays, nor when it
// comes back to the value in force since start).
func (g *Gateway) warnStartOnly(start, prev, next *config.Config) {
	for _, s := range startOnlySettings {
		if !s.runs(g.opts.Roles) {
			continue
		}
		now := s.get(next)
		if reflect.DeepEqual(now, s.get(prev)) || reflect.DeepEqual(now, s.get(start)) {
			continue
		}
		attrs := []any{"setting", s.path}
		if !s.section {
			attrs = append(attrs, "in_force", s.get(start), "reloaded", now)
		}
		g.log.Warn(s.path+" changed by a reload: it applies at restart; this process keeps the value it started with", attrs...)
	}
}
