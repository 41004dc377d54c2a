package config

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// names are used in Envoy cluster names, Redis keys and metric labels.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// modelRE is looser: provider model names carry slashes and colons.
var modelRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$`)

var hashRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// headerNameRE is an HTTP header field name (RFC 9110 token).
var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

type validator struct {
	errs Errors
	opts Options
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, &Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// secret checks a reference and, unless SkipSecrets, resolves it (once: a
// secret that already has a value, e.g. from SecretFromValue, is kept).
func (v *validator) secret(path string, s *Secret, required bool) bool {
	switch {
	case s.IsZero():
		if required {
			v.add(path, "required: env:NAME or file:PATH")
		}
		return false
	case s.Value() != "":
		return true
	case v.opts.SkipSecrets:
		if err := s.checkRef(); err != nil {
			v.add(path, "%v", err)
		}
		return false
	}
	if err := s.resolve(v.opts.LookupEnv, v.opts.BaseDir); err != nil {
		v.add(path, "%v", err)
		return false
	}
	return true
}

// secretFor is secret (not required) resolved even with SkipSecrets when
// this process uses it (need): admin.token, redis.password.
func (v *validator) secretFor(need bool, path string, s *Secret) {
	if !need {
		v.secret(path, s, false)
		return
	}
	o := *v
	o.opts.SkipSecrets = false
	o.secret(path, s, false)
	v.errs = o.errs
}

func (c *Config) validate(opts Options) Errors {
	v := &validator{opts: opts}
	c.validateListen(v)
	c.validateSecurity(v)
	c.validateRedis(v)
	c.validateSubkeys(v)
	c.validatePolicies(v)
	c.validateAdmission(v)
	c.validateAdmin(v)
	backends := c.validateBackends(v)
	models := c.validateModels(v, backends)
	c.validateTenants(v, models)
	return v.errs
}

type namedValue[T any] struct {
	path string
	val  T
}

func checkHostPort(v *validator, path, addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		v.add(path, "invalid address %q: want host:port", addr)
		return false
	}
	if n, err := net.LookupPort("tcp", port); err != nil || n < 0 || n > 65535 || strings.ContainsAny(host, "/ ") {
		v.add(path, "invalid address %q: bad host or port", addr)
		return false
	}
	return true
}

func (c *Config) validateListen(v *validator) {
	seen := map[string]string{}
	for _, a := range []namedValue[string]{
		{"listen.xds", c.Listen.XDS}, {"listen.extproc", c.Listen.ExtProc},
		{"listen.ratelimit", c.Listen.RateLimit}, {"listen.admin", c.Listen.Admin},
	} {
		if !checkHostPort(v, a.path, a.val) {
			continue
		}
		if prev, dup := seen[a.val]; dup {
			v.add(a.path, "address %q is already used by %s", a.val, prev)
		}
		seen[a.val] = a.path
	}
	for _, a := range []namedValue[string]{
		{"envoy.xds_address", c.Envoy.XDSAddress}, {"envoy.extproc_address", c.Envoy.ExtProcAddress},
		{"envoy.ratelimit_address", c.Envoy.RateLimitAddress},
	} {
		if checkHostPort(v, a.path, a.val) {
			if _, port, _ := net.SplitHostPort(a.val); port == "0" {
				v.add(a.path, "port 0 cannot be dialled; set the address Envoy should connect to")
			}
		}
	}
	if net.ParseIP(c.Envoy.ListenerAddress) == nil {
		v.add("envoy.listener_address", "invalid IP address %q", c.Envoy.ListenerAddress)
	}
	if c.Envoy.ListenerPort > 65535 {
		v.add("envoy.listener_port", "port %d out of range", c.Envoy.ListenerPort)
	}
	if !nameRE.MatchString(c.Envoy.NodeCluster) {
		v.add("envoy.node_cluster", "invalid node cluster %q", c.Envoy.NodeCluster)
	}
	if !nameRE.MatchString(c.Envoy.RateLimitDomain) {
		v.add("envoy.ratelimit_domain", "invalid domain %q", c.Envoy.RateLimitDomain)
	}
	if !slices.Contains(DNSLookupFamilies, c.Envoy.DNSLookupFamily) {
		v.add("envoy.dns_lookup_family", "must be one of %s, got %q", strings.Join(DNSLookupFamilies, ", "), c.Envoy.DNSLookupFamily)
	}
	if d := c.Envoy.RateLimitTimeout.D(); d < 10*time.Millisecond || d > 10*time.Second {
		v.add("envoy.ratelimit_timeout", "must be between 10ms and 10s, got %s", d)
	}
}

func (c *Config) validateRedis(v *validator) {
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
		if r.DB != 0 {
			v.add("redis.db", "Redis Cluster has only database 0")
		}
	default:
		v.add("redis.mode", "unknown mode %q: want standalone, sentinel or cluster", r.Mode)
	}
	if r.Mode != "sentinel" && r.MasterName != "" {
		v.add("redis.master_name", "only used in sentinel mode")
	}
	for i, a := range r.Addrs {
		checkHostPort(v, fmt.Sprintf("redis.addrs[%d]", i), a)
	}
	if r.DB < 0 || r.DB > 15 {
		v.add("redis.db", "must be between 0 and 15, got %d", r.DB)
	}
	if r.DialTimeout.Duration <= 0 {
		v.add("redis.dial_timeout", "must be positive")
	}
	if r.ReadTimeout.Duration <= 0 {
		v.add("redis.read_timeout", "must be positive")
	}
	if strings.ContainsAny(r.KeyPrefix, " \t\r\n{}") {
		v.add("redis.key_prefix", "must not contain whitespace or braces (Cluster hash tags are added by swarmgate)")
	}
	// A process that opens Redis needs the password even without upstream
	// keys: without it every command answers NOAUTH, and fail-open limits
	// silently stop holding.
	v.secretFor(v.opts.ResolveRedisPassword, "redis.password", &r.Password)
}

// MaxBodyBytesCeiling is the largest request.max_body_bytes a config may
// set. The ext_proc gRPC server, built once, sizes its message limits for
// it, so a reload that raises max_body_bytes needs no new server.
const MaxBodyBytesCeiling = 256 << 20

// validatePolicies checks the request, breaker, retry, failure mode,
// accounting, telemetry and alert settings. Float ranges are written
// !(x >= lo && x <= hi): NaN fails every comparison, so a check written
// "x < lo || x > hi" would let .nan through.
func (c *Config) validatePolicies(v *validator) {
	rq := &c.Request
	if rq.MaxBodyBytes < 1024 || rq.MaxBodyBytes > MaxBodyBytesCeiling {
		v.add("request.max_body_bytes", "must be between 1KiB and 256MiB, got %s", rq.MaxBodyBytes)
	}
	if rq.Timeout.Duration <= 0 {
		v.add("request.timeout", "must be positive")
	} else if rq.LongTimeout.Duration < rq.Timeout.Duration {
		v.add("request.long_timeout", "must not be shorter than request.timeout (%s)", rq.Timeout.Duration)
	}
	if rq.MessageTimeout.Duration <= 0 || rq.MessageTimeout.Duration.Hours() > 1 {
		v.add("request.message_timeout", "must be positive and at most 1h")
	}
	if !(rq.BytesPerToken > 0 && rq.BytesPerToken <= 16) {
		v.add("request.bytes_per_token", "must be in (0, 16], got %g", rq.BytesPerToken)
	}
	if rq.DefaultMaxOutputTokens < 0 {
		v.add("request.default_max_output_tokens", "must not be negative")
	}
	if rq.LongMaxTokens < 0 {
		v.add("request.long_max_tokens", "must not be negative")
	}
	if !headerNameRE.MatchString(rq.StickyHeader) {
		v.add("request.sticky_header", "invalid header name %q", rq.StickyHeader)
	} else if strings.HasPrefix(strings.ToLower(rq.StickyHeader), "x-swarmgate-") {
		v.add("request.sticky_header", "x-swarmgate-* headers are internal and stripped from clients")
	}
	if d := rq.ResponseAffinityTTL.Duration; d < time.Minute || d > 90*24*time.Hour {
		v.add("request.response_affinity_ttl", "must be between 1m and 90 days, got %s", d)
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
	if !(b.Jitter >= 0 && b.Jitter <= 1) {
		v.add("breaker.jitter", "must be between 0 and 1, got %g", b.Jitter)
	}
	if b.SyncInterval.Duration <= 0 {
		v.add("breaker.sync_interval", "must be positive")
	}
	if b.ResetGrace.Duration < 0 || b.ResetGrace.Duration > 10*time.Second {
		v.add("breaker.reset_grace", "must be between 0 and 10s, got %s", b.ResetGrace.Duration)
	}
	if b.AuthCooldown.Duration < 0 {
		v.add("breaker.auth_cooldown", "must be positive")
	}
	if b.HealthHold.Duration < 0 {
		v.add("breaker.health_hold", "must not be negative")
	}
	if b.HealthFlapWindow.Duration < 0 {
		v.add("breaker.health_flap_window", "must not be negative")
	}
	v.secret("identity.signing_key", &c.Identity.SigningKey, false)
	r := &c.Retry
	if r.NumRetries < 0 || r.NumRetries > 10 {
		v.add("retry.num_retries", "must be between 0 and 10, got %d", r.NumRetries)
	}
	if r.PerTryTimeout.Duration < 0 {
		v.add("retry.per_try_timeout", "must not be negative")
	} else if r.PerTryTimeout.Duration > rq.LongTimeout.Duration && rq.LongTimeout.Duration > 0 {
		v.add("retry.per_try_timeout", "is longer than request.long_timeout (%s): a try could never time out", rq.LongTimeout.Duration)
	}
	if r.BackoffBase.Duration <= 0 {
		v.add("retry.backoff_base", "must be positive")
	}
	if r.BackoffMax.Duration < r.BackoffBase.Duration {
		v.add("retry.backoff_max", "must not be shorter than retry.backoff_base (%s)", r.BackoffBase.Duration)
	}
	if !(r.BudgetPercent > 0 && r.BudgetPercent <= 100) {
		v.add("retry.budget_percent", "must be in (0, 100], got %g", r.BudgetPercent)
	}
	if r.MinRetryConcurrency < 0 {
		v.add("retry.min_retry_concurrency", "must not be negative")
	}
	f := &c.FailureModes
	for _, m := range []namedValue[FailureMode]{
		{"failure_modes.extproc", f.ExtProc}, {"failure_modes.ratelimit", f.RateLimit},
		{"failure_modes.budget", f.Budget}, {"failure_modes.reservation", f.Reservation},
		{"failure_modes.breaker_sync", f.BreakerSync},
		{"failure_modes.admission_order", f.AdmissionOrder},
	} {
		if m.val != FailOpen && m.val != FailClosed {
			v.add(m.path, "unknown failure mode %q: want open or closed", m.val)
		}
	}
	a := &c.Accounting
	switch a.BillOnDisconnect {
	case "reported", "delivered", "reserved":
	default:
		v.add("accounting.bill_on_disconnect", "unknown policy %q: want reported, delivered or reserved", a.BillOnDisconnect)
	}
	if a.TokenLimits != "reserve" && a.TokenLimits != "ratelimit" {
		v.add("accounting.token_limits", "unknown mode %q: want reserve or ratelimit", a.TokenLimits)
	}
	if a.LedgerBuffer < 0 {
		v.add("accounting.ledger_buffer", "must not be negative")
	}
	if a.ReservationTTL.Duration <= 0 {
		v.add("accounting.reservation_ttl", "must be positive")
	} else if a.ReservationTTL.Duration < rq.LongTimeout.Duration {
		v.add("accounting.reservation_ttl", "is shorter than request.long_timeout (%s): reservations of long jobs would expire while they run", rq.LongTimeout.Duration)
	}
	if len(a.Currency) != 3 || strings.ToUpper(a.Currency) != a.Currency {
		v.add("accounting.currency", "want a three-letter ISO 4217 code such as USD, got %q", a.Currency)
	}
	if !(c.Telemetry.SampleRatio >= 0 && c.Telemetry.SampleRatio <= 1) {
		v.add("telemetry.sample_ratio", "must be between 0 and 1, got %g", c.Telemetry.SampleRatio)
	}
	if e := c.Telemetry.OTLPEndpoint; e != "" {
		if _, _, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(e, "http://"), "https://")); err != nil {
			v.add("telemetry.otlp_endpoint", "want host:port (optionally with http:// or https://)")
		}
	}
	if u := c.Alerts.WebhookURL; u != "" {
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			// Never echo the URL: webhook URLs often embed a token.
			v.add("alerts.webhook_url", "must be an absolute http or https URL")
		}
	}
	if c.Alerts.Timeout.Duration <= 0 {
		v.add("alerts.timeout", "must be positive")
	}
}

// credentialHeader reports header names that carry credentials: static
// headers are printed in config dumps, so these belong in keys.
func credentialHeader(name string) bool {
	lh := strings.ToLower(name)
	switch lh {
	case "authorization", "proxy-authorization", "x-api-key", "api-key", "cookie":
		return true
	}
	for _, s := range []string{"token", "secret", "password", "apikey", "api-key", "api_key"} {
		if strings.Contains(lh, s) {
			return true
		}
	}
	return false
}

func (c *Config) validateBackends(v *validator) map[string]bool {
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
			v.add(p+".base_url", "invalid URL %q: %v", redactURL(b.BaseURL), err)
		}
		b.url = u
		if err == nil && u.host == "api.openai.com" && !strings.HasSuffix(u.path, "/v1") {
			v.add(p+".base_url", "OpenAI's API is under /v1: use https://api.openai.com/v1")
		}
		if err == nil && u.scheme != "https" {
			if b.SNI != "" {
				v.add(p+".sni", "SNI needs an https base_url")
			}
			if b.TLS.InsecureSkipVerify || b.TLS.CAFile != "" {
				v.add(p+".tls", "TLS settings need an https base_url")
			}
		}
		if b.SNI != "" && (net.ParseIP(b.SNI) != nil || strings.ContainsAny(b.SNI, ":/ ")) {
			v.add(p+".sni", "invalid server name %q: want a DNS name", b.SNI)
		}
		if b.APIStyle != "openai" && b.APIStyle != "anthropic" {
			v.add(p+".api_style", "unsupported api_style %q: want openai or anthropic", b.APIStyle)
		}
		for j, f := range b.Families {
			if !slices.Contains(FamilyNames, f) {
				v.add(p+".families["+strconv.Itoa(j)+"]", "unknown API family %q: want one of %s", f, strings.Join(FamilyNames, ", "))
			} else if slices.Index(b.Families, f) != j {
				v.add(p+".families["+strconv.Itoa(j)+"]", "API family %q listed twice", f)
			}
		}
		if b.MaxTokensField != "max_tokens" && b.MaxTokensField != "max_completion_tokens" {
			v.add(p+".max_tokens_field", "unknown field %q: want max_tokens or max_completion_tokens", b.MaxTokensField)
		}
		if !slices.Contains(HostedToolsPolicies, b.HostedTools) {
			v.add(p+".hosted_tools", "unknown policy %q: want %s", b.HostedTools, strings.Join(HostedToolsPolicies, ", "))
		}
		switch b.Auth {
		case AuthBearer, AuthXAPIKey, AuthAPIKey:
		default:
			v.add(p+".auth", "unknown auth style %q: want bearer, x-api-key or api-key", b.Auth)
		}
		for h := range b.Headers {
			hp := p + ".headers[" + h + "]"
			lh := strings.ToLower(h)
			switch {
			case !headerNameRE.MatchString(h):
				v.add(hp, "invalid header name %q", h)
			case lh == "host" || strings.HasPrefix(lh, "x-swarmgate-") || strings.HasPrefix(lh, "x-envoy-"):
				v.add(hp, "header %q is managed by swarmgate or Envoy and cannot be set here", h)
			case credentialHeader(h):
				v.add(hp, "header %q looks like a credential; static headers are not secret (put the credential in keys)", h)
			}
			if strings.ContainsAny(b.Headers[h], "\r\n\x00") {
				v.add(hp, "header value contains a line break or NUL")
			}
		}
		if b.ConnectTimeout.Duration <= 0 {
			v.add(p+".connect_timeout", "must be positive")
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
			default:
				keyIDs[k.ID] = b.Name
			}
			if k.Weight < 0 || k.Weight > 1000000 {
				v.add(kp+".weight", "must be between 0 (drained) and 1000000, got %d", k.Weight)
			} else {
				total += k.Weight
			}
			for _, n := range []namedValue[int]{{"rpm", k.RPM}, {"tpm", k.TPM}, {"max_in_flight", k.MaxInFlight}} {
				if n.val < 0 {
					v.add(kp+"."+n.path, "must not be negative (0 means unlimited)")
				}
			}
			v.secret(kp+".secret", &k.Secret, true)
		}
		if len(b.Keys) > 0 && total == 0 {
			v.add(p+".keys", "key weights sum to zero: no key would ever be picked")
		}
		for _, n := range []namedValue[int]{{"max_connections", b.MaxConnections}, {"max_pending_requests", b.MaxPendingRequests}, {"max_requests", b.MaxRequests}} {
			if n.val < 0 {
				v.add(p+"."+n.path, "must not be negative")
			}
		}
	}
	return names
}

// redactURL drops user info, query and fragment before a URL is echoed.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	if u.RawQuery != "" {
		u.RawQuery = "REDACTED"
	}
	u.Fragment = ""
	return u.String()
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
		var prios []int
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
			if t.Weight < 0 || t.Weight > 1000000 {
				v.add(tp+".weight", "must be between 0 (drained) and 1000000, got %d", t.Weight)
			}
			if t.Priority < 0 || t.Priority > 7 {
				v.add(tp+".priority", "must be between 0 and 7, got %d", t.Priority)
			}
			if _, ok := weights[t.Priority]; !ok {
				prios = append(prios, t.Priority)
			}
			weights[t.Priority] += max(0, t.Weight)
			if t.ContextWindow < 0 {
				v.add(tp+".context_window", "must not be negative")
			}
			pr := t.Price
			for _, pv := range []namedValue[float64]{{"input_per_mtok", pr.InputPerMTok}, {"output_per_mtok", pr.OutputPerMTok},
				{"cached_input_per_mtok", pr.CachedInputPerMTok}, {"reasoning_per_mtok", pr.ReasoningPerMTok},
				{"cache_write_input_per_mtok", pr.CacheWriteInputPerMTok}} {
				if !(pv.val >= 0 && pv.val <= 1e6) {
					v.add(tp+".price."+pv.path, "price must be between 0 and 1000000 per million tokens, got %g", pv.val)
				}
			}
		}
		for _, prio := range prios {
			if weights[prio] == 0 {
				v.add(p+".targets", "target weights at priority %d sum to zero: that priority would never be used", prio)
			}
		}
		if m.Timeout.Duration < 0 {
			v.add(p+".timeout", "must not be negative")
		} else if m.Timeout.Duration > c.Request.LongTimeout.Duration && c.Request.LongTimeout.Duration > 0 {
			// Reservations (accounting.reservation_ttl) and key leases are
			// sized for request.long_timeout: a longer request would lose
			// its reservation and free its key's slot while it runs.
			v.add(p+".timeout", "is longer than request.long_timeout (%s): raise long_timeout to at least it", c.Request.LongTimeout.Duration)
		}
	}
	return names
}

func (c *Config) validateTenants(v *validator, models map[string]bool) {
	names := map[string]bool{}
	hashes := map[string]string{}
	keyIDs := map[string]string{}
	counters := counterNames{}
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
			if k.derived { // computed by an earlier Prepare
				k.Hash, k.derived = "", false
			}
			switch {
			case !nameRE.MatchString(k.ID):
				v.add(kp+".id", "invalid key id %q", k.ID)
			case keyIDs[k.ID] != "":
				v.add(kp+".id", "duplicate virtual key id %q (also in %s); virtual key ids are global", k.ID, keyIDs[k.ID])
			default:
				keyIDs[k.ID] = kp
			}
			switch {
			case k.Hash != "" && !k.Secret.IsZero():
				v.add(kp, "set hash or secret, not both")
			case k.Hash != "":
				k.Hash = strings.ToLower(strings.TrimSpace(k.Hash))
				if !hashRE.MatchString(k.Hash) {
					v.add(kp+".hash", `must be "sha256:" and 64 hex digits (swarmgate hash-key prints it)`)
				}
			case !k.Secret.IsZero():
				if v.secret(kp+".secret", &k.Secret, true) {
					k.Hash, k.derived = HashKey(k.Secret.Value()), true
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
		counters.add(v, p+".limits", "tenant_"+t.Name+"_", t.Limits)
		for _, m := range slices.Sorted(maps.Keys(t.ModelLimits)) {
			l := t.ModelLimits[m]
			mp := p + ".model_limits[" + m + "]"
			if !models[m] {
				v.add(mp, "unknown model %q", m)
			} else if !t.Allows(m) {
				v.add(mp, "tenant %q may not use model %q", t.Name, m)
			}
			if l.RPD != 0 {
				// The rate-limit config has no [tenant, model, limit=rpd]
				// descriptor: accepted, it would never hold.
				v.add(mp+".rpd", "a per-model rpd is not enforced: rpd is per tenant only (set the tenant's limits.rpd)")
				l.RPD = 0
			}
			checkLimits(v, mp, l)
			counters.add(v, mp, "tenant_"+t.Name+"_model_"+m+"_", l)
		}
		if b := t.Budget; b != nil {
			// Spend is held as nano-units in an int64 (pricing.Money, about
			// 9.2e9 units): 1e12 converted to a cap that saturated or wrapped.
			if !(b.Monthly > 0 && b.Monthly <= maxBudget) {
				v.add(p+".budget.monthly", "must be positive and at most 1e+09, got %g", b.Monthly)
			}
			for j, a := range b.Alerts {
				ap := fmt.Sprintf("%s.budget.alerts[%d]", p, j)
				switch {
				case !(a > 0 && a <= 100):
					v.add(ap, "threshold %g%% out of range (0, 100]", a)
				case j > 0 && a <= b.Alerts[j-1]:
					v.add(ap, "thresholds must be strictly ascending: %g%% follows %g%%", a, b.Alerts[j-1])
				}
			}
			if b.HardCap {
				c.checkCappedModelsPriced(v, p+".budget.hard_cap", t)
			}
		}
	}
}

// checkCappedModelsPriced refuses a hard cap that some of the tenant's
// models could pass: a target with no price costs nothing, so spend served
// there would go on after the cap. Every target counts, not just one: the
// router may pick any of them (fallback, key exhaustion).
func (c *Config) checkCappedModelsPriced(v *validator, path string, t *Tenant) {
	for _, m := range c.Models {
		if !t.Allows(m.Name) {
			continue
		}
		if tg, ok := UnpricedTarget(&m); ok {
			v.add(path, "tenant %q has a hard-capped budget but model %q has no price on its target on backend %q, so spend served there never counts toward the cap: set its price or take the model out of the tenant's models", t.Name, m.Name, tg.Backend)
		}
	}
}

// UnpricedTarget returns the first target of m without a price, if any.
// A hard-capped budget (a tenant's or a sub-key's) needs every target of
// every model it covers priced.
func UnpricedTarget(m *Model) (Target, bool) {
	for _, tg := range m.Targets {
		if !(tg.Price.InputPerMTok > 0 || tg.Price.OutputPerMTok > 0) {
			return tg, true
		}
	}
	return Target{}, false
}

// counterNames are the rate-limit counters the tenants' limits make. The
// rate-limit service names a counter by joining its descriptor's entries
// with "_", and names and aliases may hold "_": tenant "acme" with a limit
// on model "gpt-4o" and a tenant named "acme_model_gpt-4o" counted in one
// window, each refused by the other's traffic.
type counterNames map[string]string

func (c counterNames) add(v *validator, path, stem string, l Limits) {
	for _, n := range []namedValue[int]{{"rpm", l.RPM}, {"rpd", l.RPD}, {"tpm", l.TPM}} {
		if n.val <= 0 {
			continue
		}
		name := stem + "limit_" + n.path
		if other, dup := c[name]; dup {
			v.add(path+"."+n.path, "its rate-limit counter %q is also %s's (names joined with \"_\" collide): rename the tenant or the model", name, other)
			continue
		}
		c[name] = path + "." + n.path
	}
}

// maxBudget bounds a monthly budget in currency units, as the sub-keys'
// (subkey.MaxBudgetAmount).
const maxBudget = 1e9

func checkLimits(v *validator, path string, l Limits) {
	for _, n := range []namedValue[int]{{"rpm", l.RPM}, {"rpd", l.RPD}, {"tpm", l.TPM}} {
		if n.val < 0 {
			v.add(path+"."+n.path, "must not be negative (0 means unlimited)")
		}
	}
	if l.RPM > 0 && l.RPD > 0 && l.RPD < l.RPM {
		v.add(path+".rpd", "requests per day (%d) is below requests per minute (%d)", l.RPD, l.RPM)
	}
}
