// Package gatewayconfig converts between the validated config model and
// swarmgate.v1.GatewayConfig, the resource that carries the routing table to
// ext_proc replicas over xDS.
package gatewayconfig

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/swarmgate/swarmgate/config"
	pb "github.com/swarmgate/swarmgate/protos/swarmgate/v1"
)

// ResourceName is the name of the one GatewayConfig resource in a snapshot.
const ResourceName = "gateway"

// FromConfig copies cfg into the wire form. Secrets are copied as references
// only and virtual keys as hashes; no credential value is ever in the result.
func FromConfig(cfg *config.Config) *pb.GatewayConfig {
	c := &pb.GatewayConfig{
		Name:     ResourceName,
		Source:   cfg.Source,
		Identity: &pb.Identity{SigningKeyRef: cfg.Identity.SigningKey.Ref()},
		Listen:   &pb.Listen{Xds: cfg.Listen.XDS, Extproc: cfg.Listen.ExtProc, Ratelimit: cfg.Listen.RateLimit, Admin: cfg.Listen.Admin},
		Envoy: &pb.Envoy{
			ListenerAddress: cfg.Envoy.ListenerAddress, ListenerPort: cfg.Envoy.ListenerPort,
			XdsAddress: cfg.Envoy.XDSAddress, ExtprocAddress: cfg.Envoy.ExtProcAddress,
			RatelimitAddress: cfg.Envoy.RateLimitAddress, NodeCluster: cfg.Envoy.NodeCluster,
			RatelimitDomain: cfg.Envoy.RateLimitDomain,
		},
		Redis: &pb.Redis{
			Mode: cfg.Redis.Mode, Addrs: cfg.Redis.Addrs, MasterName: cfg.Redis.MasterName,
			Username: cfg.Redis.Username, PasswordRef: cfg.Redis.Password.Ref(), Db: int32(cfg.Redis.DB),
			Tls: cfg.Redis.TLS, DialTimeout: d(cfg.Redis.DialTimeout), ReadTimeout: d(cfg.Redis.ReadTimeout),
			KeyPrefix: cfg.Redis.KeyPrefix,
		},
		Request: &pb.RequestPolicy{
			MaxBodyBytes: uint64(cfg.Request.MaxBodyBytes), MessageTimeout: d(cfg.Request.MessageTimeout),
			Timeout: d(cfg.Request.Timeout), LongTimeout: d(cfg.Request.LongTimeout),
			LongMaxTokens: int32(cfg.Request.LongMaxTokens), LongWhenTools: cfg.Request.LongWhenTools,
			DefaultMaxOutputTokens: int32(cfg.Request.DefaultMaxOutputTokens),
			BytesPerToken:          cfg.Request.BytesPerToken, StickyHeader: cfg.Request.StickyHeader,
		},
		Breaker: &pb.BreakerPolicy{
			Consecutive_429: int32(cfg.Breaker.Consecutive429), Consecutive_5Xx: int32(cfg.Breaker.Consecutive5xx),
			Cooldown: d(cfg.Breaker.Cooldown), MaxCooldown: d(cfg.Breaker.MaxCooldown), Jitter: cfg.Breaker.Jitter,
			SyncInterval: d(cfg.Breaker.SyncInterval), HonourRemaining: cfg.Breaker.HonourRemaining,
			ResetGrace: d(cfg.Breaker.ResetGrace), AuthCooldown: d(cfg.Breaker.AuthCooldown),
			HealthHold: d(cfg.Breaker.HealthHold), HealthFlapWindow: d(cfg.Breaker.HealthFlapWindow),
		},
		Retry: &pb.RetryPolicy{
			NumRetries: int32(cfg.Retry.NumRetries), PerTryTimeout: d(cfg.Retry.PerTryTimeout),
			BackoffBase: d(cfg.Retry.BackoffBase), BackoffMax: d(cfg.Retry.BackoffMax),
			BudgetPercent: cfg.Retry.BudgetPercent, MinRetryConcurrency: int32(cfg.Retry.MinRetryConcurrency),
		},
		FailureModes: &pb.FailureModes{
			Extproc: string(cfg.FailureModes.ExtProc), Ratelimit: string(cfg.FailureModes.RateLimit),
			Budget: string(cfg.FailureModes.Budget), Reservation: string(cfg.FailureModes.Reservation),
			BreakerSync: string(cfg.FailureModes.BreakerSync),
		},
		Accounting: &pb.Accounting{
			LedgerBuffer: int32(cfg.Accounting.LedgerBuffer), SpillFile: cfg.Accounting.SpillFile,
			BillOnDisconnect: cfg.Accounting.BillOnDisconnect, ReservationTtl: d(cfg.Accounting.ReservationTTL),
			TokenLimits: cfg.Accounting.TokenLimits, Currency: cfg.Accounting.Currency,
		},
		Alerts: &pb.Alerts{WebhookUrl: cfg.Alerts.WebhookURL, Timeout: d(cfg.Alerts.Timeout)},
		Telemetry: &pb.Telemetry{
			OtlpEndpoint: cfg.Telemetry.OTLPEndpoint, SampleRatio: cfg.Telemetry.SampleRatio,
			AccessLog: cfg.Telemetry.AccessLog, DebugBodies: cfg.Telemetry.DebugBodies,
		},
	}
	for _, b := range cfg.Backends {
		pbb := &pb.Backend{
			Name: b.Name, BaseUrl: b.BaseURL, Sni: b.SNI, TlsInsecureSkipVerify: b.TLS.InsecureSkipVerify,
			TlsCaFile: b.TLS.CAFile, ApiStyle: b.APIStyle, Auth: string(b.Auth), Headers: maps.Clone(b.Headers),
			ConnectTimeout: d(b.ConnectTimeout), MaxConnections: int32(b.MaxConnections),
			MaxPendingRequests: int32(b.MaxPendingRequests), MaxRequests: int32(b.MaxRequests),
			Families: slices.Clone(b.Families), Translate: b.Translate, MaxTokensField: b.MaxTokensField,
		}
		for _, k := range b.Keys {
			pbb.Keys = append(pbb.Keys, &pb.APIKey{
				Id: k.ID, SecretRef: k.Secret.Ref(), Weight: int32(k.Weight), Rpm: int32(k.RPM),
				Tpm: int32(k.TPM), MaxInFlight: int32(k.MaxInFlight),
			})
		}
		c.Backends = append(c.Backends, pbb)
	}
	for _, m := range cfg.Models {
		pm := &pb.Model{Name: m.Name, LongRunning: m.LongRunning, Timeout: d(m.Timeout)}
		for _, t := range m.Targets {
			pm.Targets = append(pm.Targets, &pb.Target{
				Backend: t.Backend, Model: t.Model, Weight: int32(t.Weight), Priority: int32(t.Priority),
				ContextWindow: int32(t.ContextWindow),
				Price: &pb.Price{InputPerMtok: t.Price.InputPerMTok, OutputPerMtok: t.Price.OutputPerMTok,
					CachedInputPerMtok: t.Price.CachedInputPerMTok, ReasoningPerMtok: t.Price.ReasoningPerMTok,
					CacheWriteInputPerMtok: t.Price.CacheWriteInputPerMTok},
			})
		}
		c.Models = append(c.Models, pm)
	}
	for _, t := range cfg.Tenants {
		pt := &pb.Tenant{Name: t.Name, Models: t.Models, Limits: limits(t.Limits), Sticky: t.Sticky}
		for _, k := range t.Keys {
			pt.Keys = append(pt.Keys, &pb.VirtualKey{Id: k.ID, Hash: k.Hash, Revoked: k.Revoked})
		}
		if len(t.ModelLimits) > 0 {
			pt.ModelLimits = make(map[string]*pb.Limits, len(t.ModelLimits))
			for m, l := range t.ModelLimits {
				pt.ModelLimits[m] = limits(l)
			}
		}
		if t.Budget != nil {
			pt.Budget = &pb.Budget{Monthly: t.Budget.Monthly, Alerts: t.Budget.Alerts, HardCap: t.Budget.HardCap}
		}
		c.Tenants = append(c.Tenants, pt)
	}
	return c
}

// ToConfig rebuilds a validated config from the wire form with
// config.Prepare: the same validation as a file, secret references resolved
// locally (opts), the lookup index built. The wire form carries every field
// explicitly (FromConfig copies a defaulted config), so a zero is a zero
// (a drained weight stays drained).
func ToConfig(gc *pb.GatewayConfig, opts config.Options) (*config.Config, error) {
	cfg := toRaw(gc)
	cfg.Source = gc.GetSource()
	if cfg.Source == "" {
		cfg.Source = "xds:" + ResourceName
	}
	if err := cfg.Prepare(opts); err != nil {
		return nil, fmt.Errorf("gateway config from xDS: %w", err)
	}
	return cfg, nil
}

func toRaw(gc *pb.GatewayConfig) *config.Config {
	c := &config.Config{
		Listen: config.Listen{XDS: gc.GetListen().GetXds(), ExtProc: gc.GetListen().GetExtproc(),
			RateLimit: gc.GetListen().GetRatelimit(), Admin: gc.GetListen().GetAdmin()},
	}
	e := gc.GetEnvoy()
	c.Envoy = config.Envoy{ListenerAddress: e.GetListenerAddress(), ListenerPort: e.GetListenerPort(),
		XDSAddress: e.GetXdsAddress(), ExtProcAddress: e.GetExtprocAddress(), RateLimitAddress: e.GetRatelimitAddress(),
		NodeCluster: e.GetNodeCluster(), RateLimitDomain: e.GetRatelimitDomain()}
	r := gc.GetRedis()
	c.Redis = config.Redis{Mode: r.GetMode(), Addrs: r.GetAddrs(), MasterName: r.GetMasterName(), Username: r.GetUsername(),
		Password: ref(r.GetPasswordRef()), DB: int(r.GetDb()), TLS: r.GetTls(), DialTimeout: cd(r.GetDialTimeout()),
		ReadTimeout: cd(r.GetReadTimeout()), KeyPrefix: r.GetKeyPrefix()}
	q := gc.GetRequest()
	c.Request = config.RequestPolicy{MaxBodyBytes: config.ByteSize(q.GetMaxBodyBytes()), MessageTimeout: cd(q.GetMessageTimeout()),
		Timeout: cd(q.GetTimeout()), LongTimeout: cd(q.GetLongTimeout()), LongMaxTokens: int(q.GetLongMaxTokens()),
		LongWhenTools: q.GetLongWhenTools(), DefaultMaxOutputTokens: int(q.GetDefaultMaxOutputTokens()),
		BytesPerToken: q.GetBytesPerToken(), StickyHeader: q.GetStickyHeader()}
	b := gc.GetBreaker()
	c.Breaker = config.BreakerPolicy{Consecutive429: int(b.GetConsecutive_429()), Consecutive5xx: int(b.GetConsecutive_5Xx()),
		Cooldown: cd(b.GetCooldown()), MaxCooldown: cd(b.GetMaxCooldown()), Jitter: b.GetJitter(),
		SyncInterval: cd(b.GetSyncInterval()), HonourRemaining: b.GetHonourRemaining(), ResetGrace: cd(b.GetResetGrace()),
		AuthCooldown: cd(b.GetAuthCooldown()), HealthHold: cd(b.GetHealthHold()), HealthFlapWindow: cd(b.GetHealthFlapWindow())}
	c.Identity = config.Identity{SigningKey: ref(gc.GetIdentity().GetSigningKeyRef())}
	rt := gc.GetRetry()
	c.Retry = config.RetryPolicy{NumRetries: int(rt.GetNumRetries()), PerTryTimeout: cd(rt.GetPerTryTimeout()),
		BackoffBase: cd(rt.GetBackoffBase()), BackoffMax: cd(rt.GetBackoffMax()), BudgetPercent: rt.GetBudgetPercent(),
		MinRetryConcurrency: int(rt.GetMinRetryConcurrency())}
	f := gc.GetFailureModes()
	c.FailureModes = config.FailureModes{ExtProc: config.FailureMode(f.GetExtproc()), RateLimit: config.FailureMode(f.GetRatelimit()),
		Budget: config.FailureMode(f.GetBudget()), Reservation: config.FailureMode(f.GetReservation()),
		BreakerSync: config.FailureMode(f.GetBreakerSync())}
	a := gc.GetAccounting()
	c.Accounting = config.Accounting{LedgerBuffer: int(a.GetLedgerBuffer()), SpillFile: a.GetSpillFile(),
		BillOnDisconnect: a.GetBillOnDisconnect(), ReservationTTL: cd(a.GetReservationTtl()),
		TokenLimits: a.GetTokenLimits(), Currency: a.GetCurrency()}
	c.Alerts = config.Alerts{WebhookURL: gc.GetAlerts().GetWebhookUrl(), Timeout: cd(gc.GetAlerts().GetTimeout())}
	tl := gc.GetTelemetry()
	c.Telemetry = config.Telemetry{OTLPEndpoint: tl.GetOtlpEndpoint(), SampleRatio: tl.GetSampleRatio(),
		AccessLog: tl.GetAccessLog(), DebugBodies: tl.GetDebugBodies()}
	for _, pb := range gc.GetBackends() {
		be := config.Backend{Name: pb.GetName(), BaseURL: pb.GetBaseUrl(), SNI: pb.GetSni(),
			TLS:      config.TLS{InsecureSkipVerify: pb.GetTlsInsecureSkipVerify(), CAFile: pb.GetTlsCaFile()},
			APIStyle: pb.GetApiStyle(), Auth: config.AuthStyle(pb.GetAuth()), Headers: maps.Clone(pb.GetHeaders()),
			ConnectTimeout: cd(pb.GetConnectTimeout()), MaxConnections: int(pb.GetMaxConnections()),
			MaxPendingRequests: int(pb.GetMaxPendingRequests()), MaxRequests: int(pb.GetMaxRequests()),
			Families: slices.Clone(pb.GetFamilies()), MaxTokensField: pb.GetMaxTokensField()}
		if pb.Translate != nil {
			be.Translate = new(pb.GetTranslate())
		}
		for _, k := range pb.GetKeys() {
			be.Keys = append(be.Keys, config.APIKey{ID: k.GetId(), Secret: ref(k.GetSecretRef()), Weight: int(k.GetWeight()),
				RPM: int(k.GetRpm()), TPM: int(k.GetTpm()), MaxInFlight: int(k.GetMaxInFlight())})
		}
		c.Backends = append(c.Backends, be)
	}
	for _, pm := range gc.GetModels() {
		m := config.Model{Name: pm.GetName(), LongRunning: pm.GetLongRunning(), Timeout: cd(pm.GetTimeout())}
		for _, t := range pm.GetTargets() {
			p := t.GetPrice()
			m.Targets = append(m.Targets, config.Target{Backend: t.GetBackend(), Model: t.GetModel(), Weight: int(t.GetWeight()),
				Priority: int(t.GetPriority()), ContextWindow: int(t.GetContextWindow()),
				Price: config.Price{InputPerMTok: p.GetInputPerMtok(), OutputPerMTok: p.GetOutputPerMtok(),
					CachedInputPerMTok: p.GetCachedInputPerMtok(), ReasoningPerMTok: p.GetReasoningPerMtok(),
					CacheWriteInputPerMTok: p.GetCacheWriteInputPerMtok()}})
		}
		c.Models = append(c.Models, m)
	}
	for _, pt := range gc.GetTenants() {
		t := config.Tenant{Name: pt.GetName(), Models: pt.GetModels(), Limits: climits(pt.GetLimits()), Sticky: pt.GetSticky()}
		for _, k := range pt.GetKeys() {
			t.Keys = append(t.Keys, config.VirtualKey{ID: k.GetId(), Hash: k.GetHash(), Revoked: k.GetRevoked()})
		}
		if len(pt.GetModelLimits()) > 0 {
			t.ModelLimits = make(map[string]config.Limits, len(pt.GetModelLimits()))
			for m, l := range pt.GetModelLimits() {
				t.ModelLimits[m] = climits(l)
			}
		}
		if bu := pt.GetBudget(); bu != nil {
			t.Budget = &config.Budget{Monthly: bu.GetMonthly(), Alerts: bu.GetAlerts(), HardCap: bu.GetHardCap()}
		}
		c.Tenants = append(c.Tenants, t)
	}
	return c
}

func d(x config.Duration) *durationpb.Duration {
	if x.Duration == 0 {
		return nil
	}
	return durationpb.New(x.Duration)
}

func cd(x *durationpb.Duration) config.Duration {
	if x == nil {
		return config.Duration{}
	}
	return config.Duration{Duration: time.Duration(x.GetSeconds())*time.Second + time.Duration(x.GetNanos())}
}

// ref is a secret reference to resolve locally; the value is never sent.
func ref(r string) config.Secret { return config.SecretFromValue(r, "") }

func limits(l config.Limits) *pb.Limits {
	return &pb.Limits{Rpm: int32(l.RPM), Rpd: int32(l.RPD), Tpm: int32(l.TPM)}
}

func climits(l *pb.Limits) config.Limits {
	return config.Limits{RPM: int(l.GetRpm()), RPD: int(l.GetRpd()), TPM: int(l.GetTpm())}
}
