package ledger

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Bounds of ?top=: the status page asks for 10.
const (
	defaultTop = 10
	maxTop     = 100
)

var errNoKeyUsage = errors.New("no usage recorded for this key (not a config key, and no request billed to it within the retention)")

// usageQuery is a checked /usage query string.
type usageQuery struct {
	tenant, month, requestID, key string
	label                         *Label
	// top is "keys" or a label name.
	top   string
	limit int
}

// parseQuery checks the query; its errors are the 400 answers' messages.
func parseQuery(v url.Values, now time.Time) (usageQuery, error) {
	for name, vals := range v {
		if len(vals) > 1 {
			return usageQuery{}, fmt.Errorf("%s given %d times: one at a time (counters are per key and per label, not per combination)", name, len(vals))
		}
	}
	q := usageQuery{tenant: v.Get("tenant"), month: v.Get("month"), requestID: v.Get("request_id"), key: v.Get("key")}
	if q.month == "" {
		q.month = MonthOf(now)
	} else if _, err := time.Parse("2006-01", q.month); err != nil {
		return usageQuery{}, errors.New("month must be YYYY-MM")
	}
	modes := 0
	for _, m := range []string{"request_id", "key", "label", "top"} {
		if v.Has(m) {
			modes++
		}
	}
	if modes > 1 {
		return usageQuery{}, errors.New("give one of request_id, key, label and top")
	}
	if v.Has("key") && q.key == "" {
		return usageQuery{}, errors.New("key must be a key id")
	}
	if v.Has("label") {
		lb, ok := ParseLabel(v.Get("label"))
		if !ok {
			return usageQuery{}, fmt.Errorf("label must be name=value (name 1 to %d bytes, value up to %d)", MaxLabelNameBytes, MaxLabelValueBytes)
		}
		q.label = &lb
	}
	if v.Has("top") {
		return parseTop(v, q)
	}
	if v.Has("limit") {
		return usageQuery{}, errors.New("limit goes with top")
	}
	return q, nil
}

func parseTop(v url.Values, q usageQuery) (usageQuery, error) {
	switch t := v.Get("top"); {
	case t == "keys":
		q.top = t
	case strings.HasPrefix(t, "label:") && len(t) > len("label:") && len(t)-len("label:") <= MaxLabelNameBytes:
		q.top = t
	default:
		return usageQuery{}, errors.New("top must be keys or label:NAME (label:run for the runs)")
	}
	q.limit = defaultTop
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxTop {
			return usageQuery{}, fmt.Errorf("limit must be 1 to %d", maxTop)
		}
		q.limit = n
	}
	return q, nil
}

// tenantsOf is the tenant asked for, or every configured one.
func tenantsOf(cfg *config.Config, tenant string) []string {
	if tenant != "" {
		return []string{tenant}
	}
	out := make([]string, 0, len(cfg.Tenants))
	for _, t := range cfg.Tenants {
		out = append(out, t.Name)
	}
	return out
}

// configKeyTenant is the tenant of a config key id, if it is one.
func configKeyTenant(cfg *config.Config, keyID string) (string, bool) {
	for _, t := range cfg.Tenants {
		for _, k := range t.Keys {
			if k.ID == keyID {
				return t.Name, true
			}
		}
	}
	return "", false
}

// keyTenant finds the tenant a virtual key bills to: a config key's, else
// the one (of tenant, or of every configured tenant) it has spent under.
func (l *Ledger) keyTenant(ctx context.Context, cfg *config.Config, tenant, keyID string) (string, bool, error) {
	if t, ok := configKeyTenant(cfg, keyID); ok && (tenant == "" || tenant == t) {
		return t, true, nil
	}
	return l.FindKey(ctx, tenantsOf(cfg, tenant), keyID)
}

func (l *Ledger) serveKey(w http.ResponseWriter, r *http.Request, cfg *config.Config, q usageQuery) {
	tenant, found, err := l.keyTenant(r.Context(), cfg, q.tenant, q.key)
	if err != nil {
		l.log.Error("usage key lookup failed", "key", q.key, "err", err)
		writeError(w, http.StatusServiceUnavailable, "usage store unavailable")
		return
	}
	if !found {
		writeError(w, http.StatusNotFound, errNoKeyUsage.Error())
		return
	}
	rep, err := l.QueryKey(r.Context(), tenant, q.key, q.month)
	if err != nil {
		l.log.Error("usage key query failed", "key", q.key, "month", q.month, "err", err)
		writeError(w, http.StatusServiceUnavailable, "usage store unavailable")
		return
	}
	rep.Currency = cfg.Accounting.Currency
	writeJSON(w, rep)
}

func (l *Ledger) serveLabel(w http.ResponseWriter, r *http.Request, cfg *config.Config, q usageQuery) {
	rep, err := l.QueryLabel(r.Context(), tenantsOf(cfg, q.tenant), *q.label, q.month)
	if err != nil {
		l.log.Error("usage label query failed", "label", q.label.String(), "month", q.month, "err", err)
		writeError(w, http.StatusServiceUnavailable, "usage store unavailable")
		return
	}
	rep.Currency = cfg.Accounting.Currency
	writeJSON(w, rep)
}

// TopReport is the answer of /usage?top=: the keys or label values that
// spent most in the month, by cost.
type TopReport struct {
	Month    string   `json:"month"`
	Currency string   `json:"currency,omitempty"`
	By       string   `json:"by"` // "keys" or "label:NAME"
	Top      []Ranked `json:"top"`
}

func (l *Ledger) serveTop(w http.ResponseWriter, r *http.Request, cfg *config.Config, q usageQuery) {
	tenants := tenantsOf(cfg, q.tenant)
	var (
		top []Ranked
		err error
	)
	if q.top == "keys" {
		top, err = l.TopKeys(r.Context(), tenants, q.month, q.limit)
	} else {
		top, err = l.TopLabels(r.Context(), tenants, q.month, strings.TrimPrefix(q.top, "label:"), q.limit)
	}
	if err != nil {
		l.log.Error("usage ranking failed", "top", q.top, "month", q.month, "err", err)
		writeError(w, http.StatusServiceUnavailable, "usage store unavailable")
		return
	}
	writeJSON(w, TopReport{Month: q.month, Currency: cfg.Accounting.Currency, By: q.top, Top: top})
}
