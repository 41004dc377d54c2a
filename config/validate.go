package config

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
)

// names are used in Envoy cluster names, Redis keys and metric labels.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// modelRE is looser: provider model names carry slashes and colons.
var modelRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$`)

var hashRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

type validator struct {
	errs Errors
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, &Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (c *Config) validate(opts Options) Errors {
	v := &validator{}
	c.validateListen(v)
	c.validateRedis(v, opts)
	c.validatePolicies(v)
	backends := c.validateBackends(v, opts)
	models := c.validateModels(v, backends)
	c.validateTenants(v, models, opts)
	return v.errs
}

func (c *Config) validateListen(v *validator) {
	addrs := map[string]string{}
	check := func(path, addr string) {
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			v.add(path, "invalid address %q: want host:port", addr)
			return
		}
		if prev, dup := addrs[addr]; dup {
			v.add(path, "address %q is already used by %s", addr, prev)
		}
		addrs[addr] = path
	}
	check("listen.xds", c.Listen.XDS)
	check("listen.extproc", c.Listen.ExtProc)
	check("listen.ratelimit", c.Listen.RateLimit)
	check("listen.admin", c.Listen.Admin)
	for path, addr := range map[string]string{
		"envoy.xds_address": c.Envoy.XDSAddress, "envoy.extproc_address": c.Envoy.ExtProcAddress,
		"envoy.ratelimit_address": c.Envoy.RateLimitAddress,
	} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			v.add(path, "invalid address %q: want host:port", addr)
		}
	}
	if c.Envoy.ListenerPort > 65535 {
		v.add("envoy.listener_port", "port %d out of range", c.Envoy.ListenerPort)
	}
	if !nameRE.MatchString(c.Envoy.RateLimitDomain) {
		v.add("envoy.ratelimit_domain", "invalid domain %q", c.Envoy.RateLimitDomain)
	}
}

func (c *Config) validateRedis(v *validator, opts Options) {
	r := &c.Redis
	switch r.Mode {
	case "standalone":
		if len(r.Addrs) != 1 {
			v.add("redis.addrs", "standalone mode takes exactly one address, got %d", len(r.Addrs))
		}
	case "sentinel":
		if r.MasterName == "" {
			v.add("redis.master_name", "required in sentinel mode")
		}
	case "cluster":
	default:
		v.add("redis.mode", "unknown mode %q: want standalone, sentinel or cluster", r.Mode)
	}
	for i, a := range r.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			v.add(fmt.Sprintf("redis.addrs[%d]", i), "invalid address %q: want host:port", a)
		}
	}
	if !r.Password.IsZero() && !opts.SkipSecrets {
		if err := r.Password.resolve(opts.LookupEnv); err != nil {
			v.add("redis.password", "%v", err)
		}
	}
}

func (c *Config) validatePolicies(v *validator) {
	rq := &c.Request
	if rq.MaxBodyBytes < 1024 || rq.MaxBodyBytes > 256<<20 {
		v.add("request.max_body_bytes", "must be between 1KiB and 256MiB, got %s", rq.MaxBodyBytes)
	}
	if rq.Timeout.Duration < 0 || rq.LongTimeout.Duration < rq.Timeout.Duration {
		v.add("request.long_timeout", "must not be shorter than request.timeout (%s)", rq.Timeout.Duration)
	}
	if rq.MessageTimeout.Duration <= 0 || rq.MessageTimeout.Duration.Hours() > 1 {
		v.add("request.message_timeout", "must be positive and at most 1h")
	}
	if rq.BytesPerToken <= 0 || rq.BytesPerToken > 16 {
		v.add("request.bytes_per_token", "must be in (0, 16], got %g", rq.BytesPerToken)
	}
	if rq.DefaultMaxOutputTokens < 0 || rq.LongMaxTokens < 0 {
		v.add("request.default_max_output_tokens", "must not be negative")
	}
	b := &c.Breaker
	if b.Consecutive429 < 1 {
		v.add("breaker.consecutive_429", "must be at least 1")
	}
	if b.Consecutive5xx < 1 {
		v.add("breaker.consecutive_5xx", "must be at least 1")
	}
	if b.Cooldown.Duration <= 0 {
		v.add("breaker.cooldown", "must be positive")
	}
	if b.MaxCooldown.Duration < b.Cooldown.Duration {
		v.add("breaker.max_cooldown", "must not be shorter than breaker.cooldown (%s)", b.Cooldown.Duration)
	}
	if b.Jitter < 0 || b.Jitter > 1 {
		v.add("breaker.jitter", "must be between 0 and 1, got %g", b.Jitter)
	}
	if b.SyncInterval.Duration <= 0 {
		v.add("breaker.sync_interval", "must be positive")
	}
	r := &c.Retry
	if r.NumRetries < 0 || r.NumRetries > 10 {
		v.add("retry.num_retries", "must be between 0 and 10, got %d", r.NumRetries)
	}
	if r.BackoffMax.Duration < r.BackoffBase.Duration {
		v.add("retry.backoff_max", "must not be shorter than retry.backoff_base")
	}
	if r.BudgetPercent <= 0 || r.BudgetPercent > 100 {
		v.add("retry.budget_percent", "must be in (0, 100], got %g", r.BudgetPercent)
	}
	for path, m := range map[string]FailureMode{
		"failure_modes.extproc": c.FailureModes.ExtProc, "failure_modes.ratelimit": c.FailureModes.RateLimit,
		"failure_modes.budget": c.FailureModes.Budget, "failure_modes.reservation": c.FailureModes.Reservation,
		"failure_modes.breaker_sync": c.FailureModes.BreakerSync,
	} {
		if m != FailOpen && m != FailClosed {
			v.add(path, "unknown failure mode %q: want open or closed", m)
		}
	}
	switch c.Accounting.BillOnDisconnect {
	case "reported", "delivered", "reserved":
	default:
		v.add("accounting.bill_on_disconnect", "unknown policy %q: want reported, delivered or reserved", c.Accounting.BillOnDisconnect)
	}
	if t := c.Accounting.TokenLimits; t != "reserve" && t != "ratelimit" {
		v.add("accounting.token_limits", "unknown mode %q: want reserve or ratelimit", t)
	}
	if c.Accounting.LedgerBuffer < 0 {
		v.add("accounting.ledger_buffer", "must not be negative")
	}
	if c.Accounting.ReservationTTL.Duration <= 0 {
		v.add("accounting.reservation_ttl", "must be positive")
	}
	if c.Telemetry.SampleRatio < 0 || c.Telemetry.SampleRatio > 1 {
		v.add("telemetry.sample_ratio", "must be between 0 and 1")
	}
	if u := c.Alerts.WebhookURL; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		v.add("alerts.webhook_url", "must be an http or https URL")
	}
}

func (c *Config) validateBackends(v *validator, opts Options) map[string]bool {
	names := map[string]bool{}
	keyIDs := map[string]string{}
	if len(c.Backends) == 0 {
		v.add("backends", "at least one backend is required")
	}
	for i := range c.Backends {
		b := &c.Backends[i]
		p := fmt.Sprintf("backends[%d]", i)
		switch {
		case !nameRE.MatchString(b.Name):
			v.add(p+".name", "invalid name %q: letters, digits, '.', '_' and '-', at most 63", b.Name)
		case names[b.Name]:
			v.add(p+".name", "duplicate backend name %q", b.Name)
		}
		names[b.Name] = true
		u, err := parseBaseURL(b.BaseURL)
		if err != nil {
			v.add(p+".base_url", "invalid URL %q: %v", b.BaseURL, err)
		}
		b.url = u
		if b.APIStyle != "openai" {
			v.add(p+".api_style", "unsupported api_style %q: want openai", b.APIStyle)
		}
		switch b.Auth {
		case AuthBearer, AuthXAPIKey, AuthAPIKey:
		default:
			v.add(p+".auth", "unknown auth style %q: want bearer, x-api-key or api-key", b.Auth)
		}
		for h := range b.Headers {
			lh := strings.ToLower(h)
			if lh == "authorization" || lh == "x-api-key" || lh == "api-key" || strings.HasPrefix(lh, ":") || strings.HasPrefix(lh, "x-swarmgate-") {
				v.add(p+".headers["+h+"]", "header %q is managed by swarmgate and cannot be set here", h)
			}
		}
		if len(b.Keys) == 0 {
			v.add(p+".keys", "backend %q has no API keys", b.Name)
		}
		total := 0
		for j := range b.Keys {
			k := &b.Keys[j]
			kp := fmt.Sprintf("%s.keys[%d]", p, j)
			switch {
			case !nameRE.MatchString(k.ID):
				v.add(kp+".id", "invalid key id %q", k.ID)
			case keyIDs[k.ID] != "":
				v.add(kp+".id", "duplicate key id %q (also in backend %s); key ids are global", k.ID, keyIDs[k.ID])
			}
			keyIDs[k.ID] = b.Name
			if k.Weight < 0 {
				v.add(kp+".weight", "must not be negative")
			}
			total += k.Weight
			if k.RPM < 0 || k.TPM < 0 || k.MaxInFlight < 0 {
				v.add(kp, "rpm, tpm and max_in_flight must not be negative")
			}
			switch {
			case k.Secret.IsZero():
				v.add(kp+".secret", "required: env:NAME or file:PATH")
			case !opts.SkipSecrets:
				if err := k.Secret.resolve(opts.LookupEnv); err != nil {
					v.add(kp+".secret", "%v", err)
				}
			default:
				if kind, _, _ := strings.Cut(k.Secret.ref, ":"); kind != "env" && kind != "file" {
					v.add(kp+".secret", "%v", errInlineSecret)
				}
			}
		}
		if len(b.Keys) > 0 && total == 0 {
			v.add(p+".keys", "key weights sum to zero: no key would ever be picked")
		}
		if b.MaxConnections < 0 || b.MaxPendingRequests < 0 || b.MaxRequests < 0 {
			v.add(p, "circuit-breaker thresholds must not be negative")
		}
	}
	return names
}

func (c *Config) validateModels(v *validator, backends map[string]bool) map[string]bool {
	names := map[string]bool{}
	if len(c.Models) == 0 {
		v.add("models", "at least one model is required")
	}
	for i := range c.Models {
		m := &c.Models[i]
		p := fmt.Sprintf("models[%d]", i)
		switch {
		case !modelRE.MatchString(m.Name):
			v.add(p+".name", "invalid model name %q", m.Name)
		case names[m.Name]:
			v.add(p+".name", "duplicate model name %q", m.Name)
		}
		names[m.Name] = true
		if len(m.Targets) == 0 {
			v.add(p+".targets", "model %q has no targets", m.Name)
		}
		seen := map[string]bool{}
		weights := map[int]int{}
		for j := range m.Targets {
			t := &m.Targets[j]
			tp := fmt.Sprintf("%s.targets[%d]", p, j)
			if !backends[t.Backend] {
				v.add(tp+".backend", "unknown backend %q", t.Backend)
			}
			if seen[t.Backend] {
				v.add(tp+".backend", "backend %q is listed twice for model %q", t.Backend, m.Name)
			}
			seen[t.Backend] = true
			if !modelRE.MatchString(t.Model) {
				v.add(tp+".model", "invalid upstream model name %q", t.Model)
			}
			if t.Weight < 0 {
				v.add(tp+".weight", "must not be negative")
			}
			if t.Priority < 0 || t.Priority > 7 {
				v.add(tp+".priority", "must be between 0 and 7, got %d", t.Priority)
			}
			weights[t.Priority] += t.Weight
			if t.ContextWindow < 0 {
				v.add(tp+".context_window", "must not be negative")
			}
			pr := t.Price
			for name, val := range map[string]float64{"input_per_mtok": pr.InputPerMTok, "output_per_mtok": pr.OutputPerMTok,
				"cached_input_per_mtok": pr.CachedInputPerMTok, "reasoning_per_mtok": pr.ReasoningPerMTok} {
				if val < 0 {
					v.add(tp+".price."+name, "negative price %g", val)
				}
			}
		}
		for prio, w := range weights {
			if w == 0 {
				v.add(p+".targets", "target weights at priority %d sum to zero", prio)
			}
		}
		if m.Timeout.Duration < 0 {
			v.add(p+".timeout", "must not be negative")
		}
	}
	return names
}

func (c *Config) validateTenants(v *validator, models map[string]bool, opts Options) {
	names := map[string]bool{}
	hashes := map[string]string{}
	for i := range c.Tenants {
		t := &c.Tenants[i]
		p := fmt.Sprintf("tenants[%d]", i)
		switch {
		case !nameRE.MatchString(t.Name):
			v.add(p+".name", "invalid tenant name %q", t.Name)
		case names[t.Name]:
			v.add(p+".name", "duplicate tenant name %q", t.Name)
		}
		names[t.Name] = true
		if len(t.Keys) == 0 {
			v.add(p+".keys", "tenant %q has no virtual keys", t.Name)
		}
		for j := range t.Keys {
			k := &t.Keys[j]
			kp := fmt.Sprintf("%s.keys[%d]", p, j)
			if !nameRE.MatchString(k.ID) {
				v.add(kp+".id", "invalid key id %q", k.ID)
			}
			switch {
			case k.Hash != "" && !k.Secret.IsZero():
				v.add(kp, "set hash or secret, not both")
			case k.Hash != "":
				if !hashRE.MatchString(k.Hash) {
					v.add(kp+".hash", `must be "sha256:" and 64 lowercase hex digits (swarmgate hash-key prints it)`)
				}
			case !k.Secret.IsZero():
				if err := k.Secret.resolve(opts.LookupEnv); err != nil {
					v.add(kp+".secret", "%v", err)
				} else {
					k.Hash = HashKey(k.Secret.value)
				}
			default:
				v.add(kp, "hash or secret is required")
			}
			if k.Hash != "" {
				if owner, dup := hashes[k.Hash]; dup {
					v.add(kp, "the same virtual key is already used by %s", owner)
				}
				hashes[k.Hash] = kp
			}
		}
		if len(t.Models) == 0 {
			v.add(p+".models", `tenant %q may use no model; list aliases or "*"`, t.Name)
		}
		for j, m := range t.Models {
			if m != "*" && !models[m] {
				v.add(fmt.Sprintf("%s.models[%d]", p, j), "unknown model %q", m)
			}
		}
		checkLimits(v, p+".limits", t.Limits)
		for m, l := range t.ModelLimits {
			mp := p + ".model_limits[" + m + "]"
			if !models[m] {
				v.add(mp, "unknown model %q", m)
			} else if !t.Allows(m) {
				v.add(mp, "tenant %q may not use model %q", t.Name, m)
			}
			checkLimits(v, mp, l)
		}
		if b := t.Budget; b != nil {
			if b.Monthly <= 0 {
				v.add(p+".budget.monthly", "must be positive, got %g", b.Monthly)
			}
			if !slices.IsSorted(b.Alerts) || slices.Compact(slices.Clone(b.Alerts)) == nil || len(slices.Compact(slices.Clone(b.Alerts))) != len(b.Alerts) {
				v.add(p+".budget.alerts", "thresholds must be strictly ascending, got %v", b.Alerts)
			}
			for j, a := range b.Alerts {
				if a <= 0 || a > 100 {
					v.add(fmt.Sprintf("%s.budget.alerts[%d]", p, j), "threshold %g%% out of range (0, 100]", a)
				}
			}
		}
	}
}

func checkLimits(v *validator, path string, l Limits) {
	if l.RPM < 0 || l.RPD < 0 || l.TPM < 0 {
		v.add(path, "limits must not be negative")
	}
	if l.RPM > 0 && l.RPD > 0 && l.RPD < l.RPM {
		v.add(path+".rpd", "requests per day (%d) is below requests per minute (%d)", l.RPD, l.RPM)
	}
}
