package config

import "time"

// Defaults returns a Config with every top-level default filled in and no
// backends, models or tenants: the starting point for a Config built in
// code. Parse decodes a file over these same values, so a field the file
// sets, even to zero, keeps what the file says.
// The envoy.*_address fields stay empty so that they follow Listen.
func Defaults() Config {
	var c Config
	c.prefill()
	c.applyDefaults()
	c.Envoy.XDSAddress, c.Envoy.ExtProcAddress, c.Envoy.RateLimitAddress = "", "", ""
	return c
}

// prefill sets the defaults of fields whose zero value is meaningful
// (retry.num_retries: 0 is no retries, breaker.jitter, breaker.reset_grace, breaker.health_hold, telemetry.sample_ratio,
// accounting.ledger_buffer, retry.min_retry_concurrency, admission.max_wait: 0 turns the queue off,
// admission.pace): Parse calls it
// before decoding, and applyDefaults never touches these fields again.
// docs/config.md lists every default.
func (c *Config) prefill() {
	c.Retry.NumRetries = 3
	c.Retry.MinRetryConcurrency = 10
	c.Breaker.Jitter = 0.2
	c.Breaker.ResetGrace = Duration{250 * time.Millisecond}
	c.Breaker.HealthHold = Duration{time.Second}
	c.Telemetry.SampleRatio = 1
	c.Accounting.LedgerBuffer = 100000
	// The queue and the keys' pace are on unless the file turns them off:
	// a swarm over its keys' capacity finishes more of its work when
	// requests wait for capacity that comes back within seconds than when
	// each is refused at once and retried blind (docs/admission.md).
	c.Admission.MaxWait = Duration{10 * time.Second}
	c.Admission.Pace = true
	// Booleans whose safe default is true.
	c.Request.LongWhenTools = true
	c.Breaker.HonourRemaining = true
	c.Subkeys.Retention = Duration{defaultSubkeyRetention}
	c.Subkeys.MaxPerMinter = defaultMaxPerMinter
}

// applyDefaults fills every unset field whose zero value means "default"
// (docs/config.md lists them).
func (c *Config) applyDefaults() {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	defInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defDur := func(p *Duration, v time.Duration) {
		if p.Duration == 0 {
			p.Duration = v
		}
	}
	def(&c.Listen.XDS, "127.0.0.1:18000")
	def(&c.Listen.ExtProc, "127.0.0.1:18001")
	def(&c.Listen.RateLimit, "127.0.0.1:18002")
	def(&c.Listen.Admin, "127.0.0.1:19000")

	def(&c.Envoy.ListenerAddress, "0.0.0.0")
	if c.Envoy.ListenerPort == 0 {
		c.Envoy.ListenerPort = 10000
	}
	def(&c.Envoy.XDSAddress, dialable(c.Listen.XDS))
	def(&c.Envoy.ExtProcAddress, dialable(c.Listen.ExtProc))
	def(&c.Envoy.RateLimitAddress, dialable(c.Listen.RateLimit))
	def(&c.Envoy.NodeCluster, "swarmgate")
	def(&c.Envoy.RateLimitDomain, "swarmgate")
	defDur(&c.Envoy.RateLimitTimeout, 500*time.Millisecond)
	def(&c.Envoy.DNSLookupFamily, DNSV4Preferred)

	def(&c.Redis.Mode, "standalone")
	if len(c.Redis.Addrs) == 0 {
		c.Redis.Addrs = []string{"127.0.0.1:6379"}
	}
	defDur(&c.Redis.DialTimeout, 2*time.Second)
	defDur(&c.Redis.ReadTimeout, 500*time.Millisecond)
	def(&c.Redis.KeyPrefix, "sg:")
	c.defaultSubkeys()

	if c.Request.MaxBodyBytes == 0 {
		c.Request.MaxBodyBytes = 8 << 20
	}
	defDur(&c.Request.MessageTimeout, 2*time.Second)
	defDur(&c.Request.Timeout, 120*time.Second)
	defDur(&c.Request.LongTimeout, 600*time.Second)
	defInt(&c.Request.LongMaxTokens, 4096)
	defInt(&c.Request.DefaultMaxOutputTokens, 1024)
	if c.Request.BytesPerToken == 0 {
		c.Request.BytesPerToken = 4
	}
	def(&c.Request.StickyHeader, "x-session-id")
	// OpenAI keeps stored responses for 30 days.
	defDur(&c.Request.ResponseAffinityTTL, 30*24*time.Hour)

	defInt(&c.Breaker.Consecutive429, 3)
	defInt(&c.Breaker.Consecutive5xx, 5)
	defDur(&c.Breaker.Cooldown, 30*time.Second)
	defDur(&c.Breaker.MaxCooldown, 5*time.Minute)
	defDur(&c.Breaker.SyncInterval, 500*time.Millisecond)
	defDur(&c.Breaker.AuthCooldown, 30*time.Minute)
	defDur(&c.Breaker.HealthFlapWindow, 2*time.Minute)

	defInt(&c.Admission.MaxQueue, 4096)
	defDur(&c.Admission.Poll, 20*time.Millisecond)
	defDur(&c.Admission.RedisTimeout, 50*time.Millisecond)
	defDur(&c.Admission.SessionIdle, 5*time.Second)
	for i := range c.Tenants {
		defInt(&c.Tenants[i].Weight, 1)
	}

	defDur(&c.Retry.BackoffBase, 250*time.Millisecond)
	defDur(&c.Retry.BackoffMax, 5*time.Second)
	if c.Retry.BudgetPercent == 0 {
		c.Retry.BudgetPercent = 25
	}

	defMode := func(p *FailureMode, v FailureMode) {
		if *p == "" {
			*p = v
		}
	}
	defMode(&c.FailureModes.ExtProc, FailClosed)
	defMode(&c.FailureModes.RateLimit, FailOpen)
	defMode(&c.FailureModes.Budget, FailOpen)
	defMode(&c.FailureModes.Reservation, FailOpen)
	defMode(&c.FailureModes.BreakerSync, FailOpen)
	defMode(&c.FailureModes.AdmissionOrder, FailOpen)

	def(&c.Accounting.BillOnDisconnect, "reported")
	defDur(&c.Accounting.ReservationTTL, 10*time.Minute)
	def(&c.Accounting.Currency, "USD")
	def(&c.Accounting.TokenLimits, "reserve")

	defDur(&c.Alerts.Timeout, 5*time.Second)

	for i := range c.Backends {
		b := &c.Backends[i]
		if len(b.Headers) == 0 {
			b.Headers = nil // "headers: {}" and no headers are the same config
		}
		def(&b.APIStyle, "openai")
		if len(b.Families) == 0 {
			b.Families = DefaultFamilies(b.APIStyle)
		}
		if b.Translate == nil {
			b.Translate = new(true)
		}
		def(&b.MaxTokensField, "max_tokens")
		def(&b.HostedTools, HostedToolsNativeOrDrop)
		if b.Auth == "" {
			b.Auth = AuthBearer
		}
		defDur(&b.ConnectTimeout, 5*time.Second)
		defInt(&b.MaxConnections, 1024)
		defInt(&b.MaxPendingRequests, 1024)
		defInt(&b.MaxRequests, 4096)
	}
	for i := range c.Models {
		for j := range c.Models[i].Targets {
			t := &c.Models[i].Targets[j]
			def(&t.Model, c.Models[i].Name)
		}
	}
	for i := range c.Tenants {
		if len(c.Tenants[i].ModelLimits) == 0 {
			c.Tenants[i].ModelLimits = nil
		}
		if b := c.Tenants[i].Budget; b != nil && b.Alerts == nil {
			b.Alerts = []float64{50, 75, 90}
		}
	}
}

// dialable turns a bind address such as ":18000" or "0.0.0.0:18000" into
// one a local Envoy can dial.
func dialable(addr string) string {
	for _, p := range []string{"0.0.0.0:", "[::]:", ":"} {
		if len(addr) >= len(p) && addr[:len(p)] == p {
			return "127.0.0.1:" + addr[len(p):]
		}
	}
	return addr
}
