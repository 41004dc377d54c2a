// Package config is swarmgate's one validated configuration model. Every
// component (control plane, ext_proc, rate limits, admin) consumes a *Config
// produced by Load or Parse; none of them re-parses YAML.
package config

import "time"

// Config is the whole gateway configuration, one YAML file.
type Config struct {
	Listen       Listen        `yaml:"listen" json:"listen"`
	Envoy        Envoy         `yaml:"envoy" json:"envoy"`
	Redis        Redis         `yaml:"redis" json:"redis"`
	Request      RequestPolicy `yaml:"request" json:"request"`
	Breaker      BreakerPolicy `yaml:"breaker" json:"breaker"`
	Retry        RetryPolicy   `yaml:"retry" json:"retry"`
	Admission    Admission     `yaml:"admission" json:"admission"`
	FailureModes FailureModes  `yaml:"failure_modes" json:"failure_modes"`
	Accounting   Accounting    `yaml:"accounting" json:"accounting"`
	Alerts       Alerts        `yaml:"alerts" json:"alerts"`
	Telemetry    Telemetry     `yaml:"telemetry" json:"telemetry"`
	Identity     Identity      `yaml:"identity" json:"identity"`
	Admin        Admin         `yaml:"admin" json:"admin"`
	Subkeys      Subkeys       `yaml:"subkeys" json:"subkeys"`
	Backends     []Backend     `yaml:"backends" json:"backends"`
	Models       []Model       `yaml:"models" json:"models"`
	Tenants      []Tenant      `yaml:"tenants" json:"tenants"`
	// Security is local to each process (security.go); it is not sent to
	// ext_proc replicas over xDS.
	Security Security `yaml:"security" json:"security"`

	// Source names the file this config came from (for error messages).
	Source string `yaml:"-" json:"-"`

	index index
}

// Listen holds the local addresses swarmgate's own servers bind to.
type Listen struct {
	XDS       string `yaml:"xds" json:"xds"`             // ADS gRPC server (Envoy, ratelimit, ext_proc replicas)
	ExtProc   string `yaml:"extproc" json:"extproc"`     // ext_proc gRPC server
	RateLimit string `yaml:"ratelimit" json:"ratelimit"` // envoyproxy/ratelimit gRPC (RLS) server
	Admin     string `yaml:"admin" json:"admin"`         // admin HTTP: /metrics, /healthz, status page
}

// Envoy describes how the generated Envoy configuration reaches swarmgate and
// where it listens for clients.
type Envoy struct {
	ListenerAddress string `yaml:"listener_address" json:"listener_address"`
	ListenerPort    uint32 `yaml:"listener_port" json:"listener_port"`
	// Addresses Envoy dials (host:port). They default to the Listen addresses,
	// with an unspecified host replaced by 127.0.0.1.
	XDSAddress       string `yaml:"xds_address" json:"xds_address"`
	ExtProcAddress   string `yaml:"extproc_address" json:"extproc_address"`
	RateLimitAddress string `yaml:"ratelimit_address" json:"ratelimit_address"`
	// NodeCluster is the Envoy node cluster that receives the gateway
	// snapshot; snapshots are keyed by node cluster so a fleet shares one.
	NodeCluster string `yaml:"node_cluster" json:"node_cluster"`
	// RateLimitDomain is the envoyproxy/ratelimit domain our descriptors use.
	RateLimitDomain string `yaml:"ratelimit_domain" json:"ratelimit_domain"`
	// RateLimitTimeout bounds each call Envoy's rate-limit filter makes to
	// the rate-limit service; past it failure_modes.ratelimit decides.
	RateLimitTimeout Duration `yaml:"ratelimit_timeout" json:"ratelimit_timeout"`
	// DNSLookupFamily chooses which of a backend host name's addresses go
	// to EDS (the control plane resolves them): v4_preferred, v6_preferred,
	// v4_only, v6_only or all.
	DNSLookupFamily string `yaml:"dns_lookup_family" json:"dns_lookup_family"`
}

// Redis is the shared state store: breaker state, ledgers, budgets and the
// rate-limit service's counters.
type Redis struct {
	Mode        string   `yaml:"mode" json:"mode"` // standalone | sentinel | cluster
	Addrs       []string `yaml:"addrs" json:"addrs"`
	MasterName  string   `yaml:"master_name" json:"master_name"` // sentinel only
	Username    string   `yaml:"username" json:"username"`
	Password    Secret   `yaml:"password" json:"password"`
	DB          int      `yaml:"db" json:"db"`
	TLS         bool     `yaml:"tls" json:"tls"`
	DialTimeout Duration `yaml:"dial_timeout" json:"dial_timeout"`
	ReadTimeout Duration `yaml:"read_timeout" json:"read_timeout"`
	KeyPrefix   string   `yaml:"key_prefix" json:"key_prefix"`
}

// RequestPolicy bounds what a client may send and how long upstreams may take.
type RequestPolicy struct {
	// MaxBodyBytes is the largest request body accepted (413 above it). Envoy's
	// buffer limit and ext_proc message_timeout are derived from it.
	MaxBodyBytes   ByteSize `yaml:"max_body_bytes" json:"max_body_bytes"`
	MessageTimeout Duration `yaml:"message_timeout" json:"message_timeout"`
	Timeout        Duration `yaml:"timeout" json:"timeout"`           // upstream timeout, ordinary requests
	LongTimeout    Duration `yaml:"long_timeout" json:"long_timeout"` // upstream timeout, long jobs
	// A request is a long job when it carries tools, asks for at least
	// LongMaxTokens output tokens, or its model is marked long_running.
	LongMaxTokens int  `yaml:"long_max_tokens" json:"long_max_tokens"`
	LongWhenTools bool `yaml:"long_when_tools" json:"long_when_tools"`
	// DefaultMaxOutputTokens is reserved when a request names no max_tokens.
	DefaultMaxOutputTokens int `yaml:"default_max_output_tokens" json:"default_max_output_tokens"`
	// BytesPerToken drives the fast prompt-token estimate.
	BytesPerToken float64 `yaml:"bytes_per_token" json:"bytes_per_token"`
	// StickyHeader, when a request carries it, keeps the conversation on one
	// upstream key while that key is healthy (provider prompt caching).
	StickyHeader string `yaml:"sticky_header" json:"sticky_header"`
	// ResponseAffinityTTL is how long the gateway remembers which backend
	// and key created a Responses API response, so a request naming it as
	// previous_response_id reaches that key (docs/families.md).
	ResponseAffinityTTL Duration `yaml:"response_affinity_ttl" json:"response_affinity_ttl"`
}

// BreakerPolicy configures each upstream key's circuit breaker.
type BreakerPolicy struct {
	Consecutive429 int      `yaml:"consecutive_429" json:"consecutive_429"`
	Consecutive5xx int      `yaml:"consecutive_5xx" json:"consecutive_5xx"` // 5xx and resets
	Cooldown       Duration `yaml:"cooldown" json:"cooldown"`
	MaxCooldown    Duration `yaml:"max_cooldown" json:"max_cooldown"`
	Jitter         float64  `yaml:"jitter" json:"jitter"` // fraction of the open time, 0..1
	// SyncInterval bounds how long a trip on one replica takes to reach the
	// others through Redis.
	SyncInterval Duration `yaml:"sync_interval" json:"sync_interval"`
	// HonourRemaining opens a key before the provider's 429 when it reports
	// x-ratelimit-remaining-requests/tokens of zero.
	HonourRemaining bool `yaml:"honour_remaining" json:"honour_remaining"`
	// ResetGrace is how long an attempt that ended without response headers
	// waits for its request's client cancel before it counts as a reset: a
	// client going away is not the key's failure. 0 counts every one at once.
	ResetGrace Duration `yaml:"reset_grace" json:"reset_grace"`
	// AuthCooldown is how long a key the provider refused with 401 or 403
	// stays out of rotation: a revoked key is not back in a minute.
	AuthCooldown Duration `yaml:"auth_cooldown" json:"auth_cooldown"`
	// HealthHold is the shortest time a backend whose keys were all open is
	// reported unhealthy to Envoy; it doubles with each flip inside
	// HealthFlapWindow (capped at MaxCooldown), so a flaky key cannot make
	// the control plane push EDS every second.
	HealthHold       Duration `yaml:"health_hold" json:"health_hold"`
	HealthFlapWindow Duration `yaml:"health_flap_window" json:"health_flap_window"`
}

// Identity is how the router-level ext_proc vouches for the requests it
// admitted to the per-attempt upstream filter, which may run on another
// replica: it signs the admission facts it passes on in dynamic metadata.
type Identity struct {
	// SigningKey is shared by every ext_proc replica (env:NAME or
	// file:PATH). When unset, the key is derived from the provider keys of
	// the config, which every replica holds and no client knows.
	SigningKey Secret `yaml:"signing_key" json:"signing_key"`
}

// RetryPolicy is the Envoy route retry policy generated for every pool.
type RetryPolicy struct {
	NumRetries          int      `yaml:"num_retries" json:"num_retries"`
	PerTryTimeout       Duration `yaml:"per_try_timeout" json:"per_try_timeout"`
	BackoffBase         Duration `yaml:"backoff_base" json:"backoff_base"`
	BackoffMax          Duration `yaml:"backoff_max" json:"backoff_max"`
	BudgetPercent       float64  `yaml:"budget_percent" json:"budget_percent"`
	MinRetryConcurrency int      `yaml:"min_retry_concurrency" json:"min_retry_concurrency"`
}

// FailureMode says what happens when a dependency (Redis, the rate-limit
// service, ext_proc itself) cannot answer.
type FailureMode string

const (
	FailOpen   FailureMode = "open"   // let the request through, count a metric, log
	FailClosed FailureMode = "closed" // refuse the request with 503
)

// FailureModes holds one explicit policy per dependency use.
type FailureModes struct {
	ExtProc     FailureMode `yaml:"extproc" json:"extproc"`         // Envoy: ext_proc unreachable
	RateLimit   FailureMode `yaml:"ratelimit" json:"ratelimit"`     // Envoy: rate-limit service unreachable
	Budget      FailureMode `yaml:"budget" json:"budget"`           // Redis down while checking budgets
	Reservation FailureMode `yaml:"reservation" json:"reservation"` // Redis down while reserving TPM
	BreakerSync FailureMode `yaml:"breaker_sync" json:"breaker_sync"`
	// AdmissionOrder: Redis down while queueing (open: each replica keeps
	// its own order; closed: refuse with 429 as without a queue).
	AdmissionOrder FailureMode `yaml:"admission_order" json:"admission_order"`
}

// MaxMessageTimeout is the largest max_message_timeout Envoy's ext_proc
// filter accepts (ext_proc.proto, max_message_timeout: lte 3600s).
const MaxMessageTimeout = time.Hour

// Admission configures the admission queue: requests refused only for
// capacity that comes back soon wait for it instead (docs/admission.md).
type Admission struct {
	// MaxWait is the longest a request waits (0: queueing off, refuse at
	// once as before). Tenants and classes may set their own.
	MaxWait  Duration `yaml:"max_wait" json:"max_wait"`
	MaxQueue int      `yaml:"max_queue" json:"max_queue"` // per replica
	// Poll is how often a replica's first waiter of a backend set asks the
	// shared order again.
	Poll Duration `yaml:"poll" json:"poll"`
	// RedisTimeout bounds each step of the shared order.
	RedisTimeout Duration `yaml:"redis_timeout" json:"redis_timeout"`
	// Pace admits to a backend set at its keys' request rate (rpm, or the
	// x-ratelimit-limit-requests providers report).
	Pace bool `yaml:"pace" json:"pace"`
	// CapacityWeights, with Pace, weights a pool's targets by what their
	// keys can take as learned from the providers (docs/xds.md).
	CapacityWeights bool `yaml:"capacity_weights" json:"capacity_weights"`
	// ClassHeader names the request header that may choose a class, for
	// virtual keys that list it in header_classes.
	ClassHeader string           `yaml:"class_header" json:"class_header"`
	Classes     []AdmissionClass `yaml:"classes" json:"classes"`
	// SessionHeader names the request header that identifies a client's
	// session (its chain of calls) when it sends no request.sticky_header
	// (x-session-id); without either, the virtual key is the session.
	SessionHeader string `yaml:"session_header" json:"session_header"`
	// SessionIdle ends a session that had no call admitted for this long.
	SessionIdle Duration `yaml:"session_idle" json:"session_idle"`
	// SessionSpan bounds the sessions under way at once to a backend
	// set's pace times this (0: unbounded unless MaxSessions).
	SessionSpan Duration `yaml:"session_span" json:"session_span"`
	// MaxSessions bounds the sessions under way at once on each backend
	// set (0: from the pace).
	MaxSessions int `yaml:"max_sessions" json:"max_sessions"`
}

// AdmissionClass is a priority class (planner, critic, bulk workers).
type AdmissionClass struct {
	Name     string   `yaml:"name" json:"name"`
	Priority int      `yaml:"priority" json:"priority"` // 0 first
	MaxWait  Duration `yaml:"max_wait" json:"max_wait"`
}

// Accounting configures the ledger and reservations.
type Accounting struct {
	// LedgerBuffer is how many ledger writes are kept in memory while Redis
	// is unreachable; beyond it the oldest are spilled to SpillFile.
	LedgerBuffer int    `yaml:"ledger_buffer" json:"ledger_buffer"`
	SpillFile    string `yaml:"spill_file" json:"spill_file"`
	// BillOnDisconnect: "reported" (provider usage, else delivered), "delivered"
	// (tokens streamed to the client) or "reserved" (the whole reservation).
	BillOnDisconnect string   `yaml:"bill_on_disconnect" json:"bill_on_disconnect"`
	ReservationTTL   Duration `yaml:"reservation_ttl" json:"reservation_ttl"`
	// TokenLimits picks who enforces TPM: "reserve" (ext_proc reserves the
	// estimate plus max output atomically in Redis and settles at stream
	// end; no overshoot) or "ratelimit" (the Envoy rate-limit filter charges
	// the estimate at request time and completion tokens at stream done).
	TokenLimits string `yaml:"token_limits" json:"token_limits"`
	Currency    string `yaml:"currency" json:"currency"`
}

// Alerts configures where budget alerts go besides logs and metrics.
type Alerts struct {
	WebhookURL string   `yaml:"webhook_url" json:"webhook_url"`
	Timeout    Duration `yaml:"timeout" json:"timeout"`
}

// Telemetry configures tracing and access logs.
type Telemetry struct {
	OTLPEndpoint string  `yaml:"otlp_endpoint" json:"otlp_endpoint"` // empty: tracing off
	SampleRatio  float64 `yaml:"sample_ratio" json:"sample_ratio"`
	AccessLog    bool    `yaml:"access_log" json:"access_log"`
	DebugBodies  bool    `yaml:"debug_bodies" json:"debug_bodies"` // log bodies, secrets redacted
}

// AuthStyle is how a backend expects its API key.
type AuthStyle string

const (
	AuthBearer  AuthStyle = "bearer"    // Authorization: Bearer <key>
	AuthXAPIKey AuthStyle = "x-api-key" // x-api-key: <key>
	AuthAPIKey  AuthStyle = "api-key"   // api-key: <key> (Azure OpenAI)
)

// Backend is one provider API or relay with its pool of API keys.
type Backend struct {
	Name     string    `yaml:"name" json:"name"`
	BaseURL  string    `yaml:"base_url" json:"base_url"`
	SNI      string    `yaml:"sni" json:"sni"`
	TLS      TLS       `yaml:"tls" json:"tls"`
	APIStyle string    `yaml:"api_style" json:"api_style"` // "openai" or "anthropic"
	Auth     AuthStyle `yaml:"auth" json:"auth"`
	// Families are the API families the backend serves (FamilyNames);
	// default by api_style: openai → chat_completions, completions,
	// embeddings; anthropic → anthropic_messages. Requests are routed only to
	// targets whose backend serves the request's family.
	Families []string `yaml:"families" json:"families"`
	// Translate lets the gateway serve the backend requests of families it
	// does not speak by translating them (TranslationTargets; default
	// true): Anthropic Messages and Responses clients on a chat completions
	// relay, chat clients on an Anthropic backend (docs/families.md).
	Translate *bool `yaml:"translate" json:"translate"`
	// ExposeUpstreamModel lets answers from this backend name the model as
	// the backend does (a target's upstream model). By default an answer
	// names the alias the client asked for; logs, traces and the ledger
	// keep the upstream name either way.
	ExposeUpstreamModel bool `yaml:"expose_upstream_model" json:"expose_upstream_model"`
	// MaxTokensField names the output cap in chat completions requests the
	// gateway translates for this backend: max_tokens (default) or
	// max_completion_tokens (OpenAI's reasoning models refuse max_tokens).
	MaxTokensField string `yaml:"max_tokens_field" json:"max_tokens_field"`
	// HostedTools is what a translated request does with tools this
	// backend's family cannot run (web search, file search, code
	// interpreter, computer use, Anthropic's server tools):
	// native_or_drop (default) routes it to the model's targets that speak
	// the client's family natively when it has any, else drops the tools;
	// drop always drops them; refuse answers 400 naming the tool when no
	// native target can take it. Dropped tools are named in the answer's
	// x-swarmgate-dropped-tools header (docs/families.md).
	HostedTools string `yaml:"hosted_tools" json:"hosted_tools"`
	// Headers are static headers added to every upstream request.
	Headers        map[string]string `yaml:"headers" json:"headers"`
	Keys           []APIKey          `yaml:"keys" json:"keys"`
	ConnectTimeout Duration          `yaml:"connect_timeout" json:"connect_timeout"`
	// Envoy cluster circuit-breaker thresholds for this backend's endpoint.
	MaxConnections     int `yaml:"max_connections" json:"max_connections"`
	MaxPendingRequests int `yaml:"max_pending_requests" json:"max_pending_requests"`
	MaxRequests        int `yaml:"max_requests" json:"max_requests"`

	url parsedURL
}

// Hosted-tools policies (Backend.HostedTools).
const (
	HostedToolsNativeOrDrop = "native_or_drop"
	HostedToolsDrop         = "drop"
	HostedToolsRefuse       = "refuse"
)

// HostedToolsPolicies are the valid Backend.HostedTools values.
var HostedToolsPolicies = []string{HostedToolsNativeOrDrop, HostedToolsDrop, HostedToolsRefuse}

// TLS configures the upstream TLS connection.
type TLS struct {
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify" json:"insecure_skip_verify"`
	CAFile             string `yaml:"ca_file" json:"ca_file"`
}

// APIKey is one upstream credential in a backend's pool.
type APIKey struct {
	ID          string `yaml:"id" json:"id"`
	Secret      Secret `yaml:"secret" json:"secret"`
	Weight      int    `yaml:"weight" json:"weight"`
	RPM         int    `yaml:"rpm" json:"rpm"`
	TPM         int    `yaml:"tpm" json:"tpm"`
	MaxInFlight int    `yaml:"max_in_flight" json:"max_in_flight"`
}

// Model is a public model name (alias) served by one or more targets.
type Model struct {
	Name        string   `yaml:"name" json:"name"`
	LongRunning bool     `yaml:"long_running" json:"long_running"`
	Timeout     Duration `yaml:"timeout" json:"timeout"` // overrides request.timeout
	Targets     []Target `yaml:"targets" json:"targets"`
}

// Target is one backend that serves a model alias.
type Target struct {
	Backend       string `yaml:"backend" json:"backend"`
	Model         string `yaml:"model" json:"model"` // upstream model name; defaults to the alias
	Weight        int    `yaml:"weight" json:"weight"`
	Priority      int    `yaml:"priority" json:"priority"` // 0 first; higher ones take over when lower fail
	ContextWindow int    `yaml:"context_window" json:"context_window"`
	Price         Price  `yaml:"price" json:"price"`
}

// Price is money per million tokens, in Accounting.Currency.
type Price struct {
	InputPerMTok       float64 `yaml:"input_per_mtok" json:"input_per_mtok"`
	OutputPerMTok      float64 `yaml:"output_per_mtok" json:"output_per_mtok"`
	CachedInputPerMTok float64 `yaml:"cached_input_per_mtok" json:"cached_input_per_mtok"`
	ReasoningPerMTok   float64 `yaml:"reasoning_per_mtok" json:"reasoning_per_mtok"` // 0: billed as output
	// CacheWriteInputPerMTok prices prompt tokens written to the provider's
	// cache (Anthropic's cache_creation_input_tokens); 0: billed as input.
	CacheWriteInputPerMTok float64 `yaml:"cache_write_input_per_mtok" json:"cache_write_input_per_mtok"`
}

// Tenant is one team or product sharing the gateway.
type Tenant struct {
	Name        string            `yaml:"name" json:"name"`
	Keys        []VirtualKey      `yaml:"keys" json:"keys"`
	Models      []string          `yaml:"models" json:"models"` // allowed aliases; "*" allows all
	Limits      Limits            `yaml:"limits" json:"limits"`
	ModelLimits map[string]Limits `yaml:"model_limits" json:"model_limits"`
	Budget      *Budget           `yaml:"budget" json:"budget"`
	// Sticky keeps each of the tenant's virtual keys on one upstream key.
	Sticky bool `yaml:"sticky" json:"sticky"`
	// Weight is the tenant's share of a backend set while requests queue
	// (default 1); MaxWait overrides admission.max_wait.
	Weight  int      `yaml:"weight" json:"weight"`
	MaxWait Duration `yaml:"max_wait" json:"max_wait"`
}

// VirtualKey is a caller credential. Only its SHA-256 hash is kept.
type VirtualKey struct {
	ID string `yaml:"id" json:"id"`
	// Hash is "sha256:<hex>" of the key. Alternatively Secret names where the
	// plain key is (env:/file:) and it is hashed at load.
	Hash    string `yaml:"hash" json:"hash"`
	Secret  Secret `yaml:"secret" json:"secret"`
	Revoked bool   `yaml:"revoked" json:"revoked"`
	// Class is the admission class of the key's requests; HeaderClasses
	// the classes admission.class_header may choose instead (nothing a
	// client sends chooses a class otherwise).
	Class         string   `yaml:"class" json:"class"`
	HeaderClasses []string `yaml:"header_classes" json:"header_classes"`
	// Minter lets the key mint sub-keys of its own tenant through the key
	// API (docs/subkeys.md) without the admin token: a planner's key.
	Minter bool `yaml:"minter" json:"minter"`
	// Labels are a sub-key's labels (internal/subkey), carried into each
	// ledger entry of its requests; config keys have none. Read only.
	Labels map[string]string `yaml:"-" json:"-"`
	// Limits are a sub-key's own rpm/rpd/tpm, which ext_proc hands to the
	// rate-limit filter; config keys have none (their tenant's apply).
	// Read only.
	Limits Limits `yaml:"-" json:"-"`

	derived bool // Hash was computed from Secret
}

// HashFromSecret reports whether Hash was computed at load from the key
// Secret names (the wire form then sends the hash alone).
func (k *VirtualKey) HashFromSecret() bool { return k.derived }

// Limits are request and token rates. Zero means unlimited.
type Limits struct {
	RPM int `yaml:"rpm" json:"rpm"`
	RPD int `yaml:"rpd" json:"rpd"`
	TPM int `yaml:"tpm" json:"tpm"`
}

// Budget is money per calendar month (UTC).
type Budget struct {
	Monthly float64 `yaml:"monthly" json:"monthly"`
	// Alerts are percentages of Monthly, ascending, each fired once a month.
	Alerts  []float64 `yaml:"alerts" json:"alerts"`
	HardCap bool      `yaml:"hard_cap" json:"hard_cap"`
}
