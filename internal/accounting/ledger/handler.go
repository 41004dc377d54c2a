package ledger

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Handler serves GET /usage on the admin port, JSON in every answer:
//
//   - ?tenant=T&month=YYYY-MM: the tenant's Report (month defaults to the
//     current UTC month); without tenant, a Summary of every configured
//     tenant's month totals;
//   - ?request_id=ID[&tenant=T]: that request's Entry;
//   - ?key=ID[&tenant=T]: a virtual key's ScopeReport (the key's tenant is
//     the config's for a config key, else the one it spent under);
//   - ?label=name=value[&tenant=T]: a label's LabelReport over every
//     configured tenant (or T);
//   - ?top=keys|label:NAME[&limit=N][&tenant=T]: the keys or label values
//     (label:run, the runs) spending most in the month, a TopReport.
//
// cfg returns the config in force at each request, so a tenant added by a
// reload is known at once and a removed one answers 404.
func (l *Ledger) Handler(cfg func() *config.Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cfg := cfg()
		if cfg == nil {
			writeError(w, http.StatusServiceUnavailable, "no config loaded")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		q, err := parseQuery(r.URL.Query(), l.opts.Now())
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if q.tenant != "" {
			if _, ok := cfg.Tenant(q.tenant); !ok {
				writeError(w, http.StatusNotFound, "unknown tenant")
				return
			}
		}
		switch {
		case q.requestID != "":
			l.serveEntry(w, r, cfg, q.tenant, q.requestID)
		case q.key != "":
			l.serveKey(w, r, cfg, q)
		case q.label != nil:
			l.serveLabel(w, r, cfg, q)
		case q.top != "":
			l.serveTop(w, r, cfg, q)
		case q.tenant == "":
			l.serveSummary(w, r, cfg, q.month)
		default:
			l.serveTenant(w, r, cfg, q.tenant, q.month)
		}
	})
}

func (l *Ledger) serveTenant(w http.ResponseWriter, r *http.Request, cfg *config.Config, tenant, month string) {
	rep, err := l.Query(r.Context(), tenant, month)
	if err != nil {
		l.log.Error("usage query failed", "tenant", tenant, "month", month, "err", err)
		writeError(w, http.StatusServiceUnavailable, "usage store unavailable")
		return
	}
	rep.Currency = cfg.Accounting.Currency
	writeJSON(w, rep)
}

// Summary is every configured tenant's totals for one month, the answer of
// /usage without a tenant; /usage?tenant=T has the rows and days.
type Summary struct {
	Month    string          `json:"month"`
	Currency string          `json:"currency,omitempty"`
	Tenants  []TenantCounter `json:"tenants"`
}

// TenantCounter is one tenant's month totals.
type TenantCounter struct {
	Tenant string   `json:"tenant"`
	Total  Counters `json:"total"`
}

func (l *Ledger) serveSummary(w http.ResponseWriter, r *http.Request, cfg *config.Config, month string) {
	sum := Summary{Month: month, Currency: cfg.Accounting.Currency, Tenants: make([]TenantCounter, 0, len(cfg.Tenants))}
	for _, t := range cfg.Tenants {
		rep, err := l.Query(r.Context(), t.Name, month)
		if err != nil {
			l.log.Error("usage query failed", "tenant", t.Name, "month", month, "err", err)
			writeError(w, http.StatusServiceUnavailable, "usage store unavailable")
			return
		}
		sum.Tenants = append(sum.Tenants, TenantCounter{Tenant: t.Name, Total: rep.Total})
	}
	writeJSON(w, sum)
}

// serveEntry answers one request's entry; without a tenant it looks under
// every configured tenant.
func (l *Ledger) serveEntry(w http.ResponseWriter, r *http.Request, cfg *config.Config, tenant, id string) {
	tenants := []string{tenant}
	if tenant == "" {
		tenants = tenants[:0]
		for _, t := range cfg.Tenants {
			tenants = append(tenants, t.Name)
		}
	} else if _, ok := cfg.Tenant(tenant); !ok {
		writeError(w, http.StatusNotFound, "unknown tenant")
		return
	}
	e, found, err := l.Lookup(r.Context(), tenants, id)
	switch {
	case err != nil:
		l.log.Error("ledger lookup failed", "request_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "usage store unavailable")
	case !found:
		writeError(w, http.StatusNotFound, "no ledger entry for this request id (refused requests have none; entries are kept for the dedupe period)")
	default:
		writeJSON(w, e)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"message": msg}})
}

var errNoTenant = errors.New("ledger: unknown tenant")
