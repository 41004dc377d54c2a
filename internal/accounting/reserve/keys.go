package reserve

import (
	"time"

	"github.com/swarmgate/swarmgate/internal/accounting/ledger"
	"github.com/swarmgate/swarmgate/internal/accounting/pricing"
)

// KeyBudget is a sub-key's money budget per Period ("run": the key's whole
// life, "day" or "month", UTC).
type KeyBudget struct {
	Amount  float64
	Period  string
	HardCap bool
	Alerts  []float64
}

// KeyInfo is what the reserver needs of a sub-key: its tenant, the key
// that minted it ("" for none) and its budget, if any.
type KeyInfo struct {
	Tenant    string
	Parent    string
	Budget    KeyBudget
	HasBudget bool
}

// Keys resolves a key id to its KeyInfo without a round trip (the sub-key
// store's cache). A config key is not found.
type Keys interface {
	KeyInfo(id string) (KeyInfo, bool)
}

// maxChain bounds the walk up the minting chain: a tree deeper than this
// (or a loop in corrupt data) stops there.
const maxChain = 8

// KeyHold is one key budget on a request's chain, as reserved: the scope
// keys follow from KeyID and Window, so a settle touches the period the
// request was admitted in even after it rolled over.
type KeyHold struct {
	KeyID  string
	Period string
	// Window is the period's instance: "run", "2006-01-02" or "2006-01".
	Window  string
	Cap     pricing.Money
	HardCap bool
	Alerts  []float64
}

// keyHolds walks from keyID up its parents and returns every budget on the
// way, the request's own key first. Keys of another tenant end the walk:
// a tenant's spend never counts toward another's key.
func keyHolds(keys Keys, tenant, keyID string, now time.Time) []KeyHold {
	if keys == nil || keyID == "" {
		return nil
	}
	var out []KeyHold
	for id, n := keyID, 0; id != "" && n < maxChain; n++ {
		k, ok := keys.KeyInfo(id)
		if !ok || k.Tenant != tenant {
			break
		}
		if k.HasBudget && k.Budget.Amount > 0 {
			out = append(out, KeyHold{KeyID: id, Period: k.Budget.Period, Window: windowOf(k.Budget.Period, now),
				Cap: pricing.FromFloat(k.Budget.Amount), HardCap: k.Budget.HardCap, Alerts: k.Budget.Alerts})
		}
		id = k.Parent
	}
	return out
}

// windowOf names the instance of period that now falls in.
func windowOf(period string, now time.Time) string {
	switch period {
	case "day":
		return now.UTC().Format(time.DateOnly)
	case "month":
		return ledger.MonthOf(now)
	}
	return "run"
}

// untilReset is the time until a period's next instance; 0 for "run",
// which never resets.
func untilReset(period string, now time.Time) time.Duration {
	now = now.UTC()
	switch period {
	case "day":
		return time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC).Sub(now)
	case "month":
		return time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC).Sub(now)
	}
	return 0
}

// spendTTL keeps a key's spend counter past its period (and the alerts
// that read it); a run's counter lives as long as the key may be used.
func spendTTL(period string) time.Duration {
	switch period {
	case "day":
		return 3 * 24 * time.Hour
	case "month":
		return 40 * 24 * time.Hour
	}
	return 0
}

func keyScopeKeys(prefix, tenant string, h KeyHold) (z, hash, spend string) {
	s := "rv:key:" + h.KeyID + ":" + h.Window
	return ledger.TenantKey(prefix, tenant, s+":z"), ledger.TenantKey(prefix, tenant, s+":h"),
		ledger.TenantKey(prefix, tenant, s+":spent")
}
