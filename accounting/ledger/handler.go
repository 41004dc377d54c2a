package ledger

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/swarmgate/swarmgate/config"
)

// Handler serves GET /usage?tenant=T&month=YYYY-MM (month defaults to the
// current UTC month) as a JSON Report, for the admin port. cfg returns the
// config in force at each request, so a tenant added by a reload is known
// at once and a removed one answers 404.
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
		q := r.URL.Query()
		tenant, month := q.Get("tenant"), q.Get("month")
		if month == "" {
			month = MonthOf(l.opts.Now())
		}
		if tenant == "" {
			writeError(w, http.StatusBadRequest, "query parameter tenant is required")
			return
		}
		if _, ok := cfg.Tenant(tenant); !ok {
			writeError(w, http.StatusNotFound, "unknown tenant")
			return
		}
		if _, err := time.Parse("2006-01", month); err != nil {
			writeError(w, http.StatusBadRequest, "month must be YYYY-MM")
			return
		}
		rep, err := l.Query(r.Context(), tenant, month)
		if err != nil {
			l.log.Error("usage query failed", "tenant", tenant, "month", month, "err", err)
			writeError(w, http.StatusServiceUnavailable, "usage store unavailable")
			return
		}
		rep.Currency = cfg.Accounting.Currency
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	})
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"message": msg}})
}

var errNoTenant = errors.New("ledger: unknown tenant")
