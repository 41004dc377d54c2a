package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
	"github.com/swarmgate/swarmgate/internal/accounting/usage"
	"github.com/swarmgate/swarmgate/internal/jsonstr"
)

// Entry is the accounting record of one finished (or abandoned) request.
type Entry struct {
	// RequestID is the gateway's request id, the one every answer carries
	// (x-request-id, or request-id in Anthropic's shape), shared by every
	// report of the same request; it is the idempotency key.
	RequestID string `json:"request_id"`
	Tenant    string `json:"tenant"`
	Model     string `json:"model"` // public model alias
	// UpstreamModel is the model name the backend was asked for (the
	// target's model), when it differs from the alias.
	UpstreamModel string `json:"upstream_model,omitempty"`
	Backend       string `json:"backend"` // backend that served it
	KeyID         string `json:"key_id"`  // upstream API key id (never the key)
	// VirtualKeyID is the client's virtual key: a config key's id or a
	// sub-key's. Labels are the sub-key's labels, bounded (BoundLabels).
	// Both have counters of their own (scopes.go).
	VirtualKeyID string            `json:"virtual_key_id,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	// Status is the HTTP status the client got (0: none, a cut stream).
	Status int `json:"status,omitempty"`
	// Usage is what the provider reported (or, on a disconnect without a
	// usage report, what the billing policy derived).
	Usage usage.Usage   `json:"usage"`
	Cost  pricing.Money `json:"cost"`
	// Time decides the day and month the entry counts in; replays keep it.
	Time     time.Time `json:"time"`
	Streamed bool      `json:"streamed,omitempty"`
	// Partial marks a stream that ended by a client disconnect or an
	// upstream reset.
	Partial bool `json:"partial,omitempty"`
}

// detail is the entry as stored under its request id (Lookup): JSON that
// decodes into Entry, written by hand and kept small because Redis holds
// one per request for the dedupe period. The request id and tenant are the
// key's; zero counts and empty names are left out; the time is to the
// second.
func (e *Entry) detail() string {
	b := make([]byte, 0, 256)
	b = append(b, `{"model":`...)
	b = jsonstr.Append(b, e.Model)
	if e.UpstreamModel != "" {
		b = append(b, `,"upstream_model":`...)
		b = jsonstr.Append(b, e.UpstreamModel)
	}
	b = append(b, `,"backend":`...)
	b = jsonstr.Append(b, e.Backend)
	b = append(b, `,"key_id":`...)
	b = jsonstr.Append(b, e.KeyID)
	if e.VirtualKeyID != "" {
		b = append(b, `,"virtual_key_id":`...)
		b = jsonstr.Append(b, e.VirtualKeyID)
	}
	b = appendLabels(b, e.Labels)
	if e.Status != 0 {
		b = strconv.AppendInt(append(b, `,"status":`...), int64(e.Status), 10)
	}
	b = append(b, `,"usage":{`...)
	n := len(b)
	for _, f := range [...]struct {
		name string
		v    int64
	}{{"prompt_tokens", e.Usage.PromptTokens}, {"completion_tokens", e.Usage.CompletionTokens}, {"total_tokens", e.Usage.TotalTokens},
		{"cached_tokens", e.Usage.CachedTokens}, {"reasoning_tokens", e.Usage.ReasoningTokens}, {"cache_write_tokens", e.Usage.CacheWriteTokens}} {
		if f.v == 0 {
			continue
		}
		if len(b) > n {
			b = append(b, ',')
		}
		b = strconv.AppendInt(append(append(append(b, '"'), f.name...), `":`...), f.v, 10)
	}
	b = append(b, `},"cost":"`...)
	b = append(b, e.Cost.String()...)
	b = append(b, `","time":"`...)
	b = e.Time.UTC().AppendFormat(b, time.RFC3339)
	b = append(b, '"')
	if e.Streamed {
		b = append(b, `,"streamed":true`...)
	}
	if e.Partial {
		b = append(b, `,"partial":true`...)
	}
	return string(append(b, '}'))
}

// Counter field names inside the day and month hashes. A field is
// "<model>|<backend>|<key>|<counter>"; the tenant's totals use the dims "*".
const (
	fieldRequests  = "req"
	fieldInput     = "in"
	fieldOutput    = "out"
	fieldTotal     = "total"
	fieldCached    = "cached"
	fieldReasoning = "reasoning"
	fieldCost      = "cost"
	fieldStreamed  = "streamed"
	fieldPartial   = "partial"
	totalDims      = "*"
)

// TotalCostField is the month hash field holding the tenant's spend in
// pricing.Money units; budgets and reservations read it.
const TotalCostField = totalDims + "|" + fieldCost

// TenantKey builds a key in the tenant's hash slot: every key of a tenant,
// the ledger's and the reservations', carries the tag {t:<tenant>} so Lua
// scripts over several of them work on Redis Cluster.
func TenantKey(prefix, tenant, suffix string) string {
	return prefix + "{t:" + tenant + "}:" + suffix
}

// MonthKey is the tenant's month hash, month as "2006-01".
func MonthKey(prefix, tenant, month string) string {
	return TenantKey(prefix, tenant, "acct:m:"+month)
}

// DayKey is the tenant's day hash, day as "2006-01-02".
func DayKey(prefix, tenant, day string) string {
	return TenantKey(prefix, tenant, "acct:d:"+day)
}

func seenKey(prefix, tenant, requestID string) string {
	if len(requestID) > 64 {
		sum := sha256.Sum256([]byte(requestID))
		requestID = "h:" + hex.EncodeToString(sum[:])
	}
	return TenantKey(prefix, tenant, "acct:seen:"+requestID)
}

// MonthOf is the UTC calendar month of t, "2006-01".
func MonthOf(t time.Time) string { return t.UTC().Format("2006-01") }

func dims(e *Entry) string {
	return orDash(e.Model) + "|" + orDash(e.Backend) + "|" + orDash(e.KeyID)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
