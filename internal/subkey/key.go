// Package subkey holds virtual keys minted at run time under a config
// tenant: their model, a Redis store that keeps only each key's hash, and
// an in-process cache the data path reads without a Redis round trip.
package subkey

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/swarmgate/swarmgate/internal/config"
)

// Key is one sub-key. The plain key is never part of it: Hash is
// config.HashKey of the plain key.
type Key struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// Parent is the id of the key that minted it ("" when the admin did).
	Parent string        `json:"parent,omitempty"`
	Hash   string        `json:"hash"`
	Limits config.Limits `json:"limits"`
	// Models restricts the tenant's models; empty means all of the tenant's.
	Models    []string          `json:"models,omitempty"`
	Class     string            `json:"class,omitempty"`
	ExpiresAt time.Time         `json:"expires_at,omitzero"`
	Labels    map[string]string `json:"labels,omitempty"`
	Minter    bool              `json:"minter,omitempty"`
	Revoked   bool              `json:"revoked,omitempty"`
	// Budget is enforced by the reservations (accounting/reserve): its
	// spend, and that of every key it minted, counts toward it.
	Budget    *Budget   `json:"budget,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`

	// owned is the key as the data path's owner carries it, made when the
	// key enters the cache.
	owned *config.VirtualKey
	// tenant caches the tenant narrowed to Models for the config in use,
	// made with owned.
	tenant *narrowedCache
}

// narrowedCache holds a cached key's narrowed tenant.
type narrowedCache struct {
	p atomic.Pointer[narrowedTenant]
}

// MaxBudgetAmount bounds a budget's amount, in currency units: a budget is
// held and spent as pricing.Money (nano-units in an int64, about 9.2e9
// units), and 1e10 once converted to a negative cap that refused every
// request. 1e9 converts exactly and leaves room for spend and holds.
const MaxBudgetAmount = 1e9

// Budget is money per Period ("run", "day" or "month").
type Budget struct {
	Amount  float64   `json:"amount"`
	Period  string    `json:"period"`
	HardCap bool      `json:"hard_cap,omitempty"`
	Alerts  []float64 `json:"alerts,omitempty"`
}

// Expired reports whether the key's expiry is at or before now.
func (k *Key) Expired(now time.Time) bool {
	return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt)
}

// plainPrefix starts every plain sub-key.
const plainPrefix = "sk-sg-"

// FieldError names the field of a request that is wrong.
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Validate checks k against the config and, when parent is not nil,
// against the minting key: the same tenant, no higher limits, models
// among the parent's, the parent's class and no later expiry.
func Validate(cfg *config.Config, k *Key, parent *Key, now time.Time) error {
	t, ok := cfg.Tenant(k.Tenant)
	if !ok {
		return &FieldError{"tenant", fmt.Sprintf("unknown tenant %q", k.Tenant)}
	}
	for _, m := range k.Models {
		if _, ok := cfg.Model(m); !ok {
			return &FieldError{"models", fmt.Sprintf("unknown model %q", m)}
		}
		if !t.Allows(m) {
			return &FieldError{"models", fmt.Sprintf("model %q is not allowed to tenant %q", m, t.Name)}
		}
	}
	if !k.ExpiresAt.IsZero() && !k.ExpiresAt.After(now) {
		return &FieldError{"expires_at", "is in the past"}
	}
	if k.Class != "" {
		if _, ok := cfg.AdmissionClass(k.Class); !ok {
			return &FieldError{"class", fmt.Sprintf("unknown admission class %q", k.Class)}
		}
	}
	if k.Limits.RPM < 0 || k.Limits.RPD < 0 || k.Limits.TPM < 0 {
		return &FieldError{"limits", "must not be negative"}
	}
	if b := k.Budget; b != nil {
		switch b.Period {
		case "run", "day", "month":
		default:
			return &FieldError{"budget.period", fmt.Sprintf("%q is not run, day or month", b.Period)}
		}
		if !(b.Amount > 0) {
			return &FieldError{"budget.amount", "must be positive"}
		}
		if b.Amount > MaxBudgetAmount {
			return &FieldError{"budget.amount", fmt.Sprintf("%v is above the maximum of %.0f", b.Amount, float64(MaxBudgetAmount))}
		}
		for _, a := range b.Alerts {
			if a <= 0 || a > 100 {
				return &FieldError{"budget.alerts", fmt.Sprintf("%v is not a percentage in (0, 100]", a)}
			}
		}
		if err := validateBudget(cfg, t, k); err != nil {
			return err
		}
	}
	if err := validateLabels(k.Labels); err != nil {
		return err
	}
	if parent == nil {
		return nil
	}
	return validateMinted(k, parent)
}

// validateMinted checks a minted key against its parent: nothing it may
// do that the parent may not.
func validateMinted(k, parent *Key) error {
	if parent.Tenant != k.Tenant {
		return &FieldError{"tenant", fmt.Sprintf("a minter of tenant %q may not mint for %q", parent.Tenant, k.Tenant)}
	}
	for _, c := range []struct {
		field      string
		own, limit int
	}{{"limits.rpm", k.Limits.RPM, parent.Limits.RPM}, {"limits.rpd", k.Limits.RPD, parent.Limits.RPD}, {"limits.tpm", k.Limits.TPM, parent.Limits.TPM}} {
		if c.limit > 0 && (c.own == 0 || c.own > c.limit) {
			return &FieldError{c.field, fmt.Sprintf("must be at most the parent's %d", c.limit)}
		}
	}
	if len(parent.Models) > 0 {
		allowed := map[string]bool{}
		for _, m := range parent.Models {
			allowed[m] = true
		}
		if len(k.Models) == 0 {
			return &FieldError{"models", "must be a subset of the parent's"}
		}
		for _, m := range k.Models {
			if !allowed[m] {
				return &FieldError{"models", fmt.Sprintf("model %q is not among the parent's", m)}
			}
		}
	}
	if parent.Class != "" && k.Class != parent.Class {
		// A class is a priority: a minted key may not jump its parent's queue.
		return &FieldError{"class", fmt.Sprintf("must be the parent's class %q", parent.Class)}
	}
	if !parent.ExpiresAt.IsZero() && (k.ExpiresAt.IsZero() || k.ExpiresAt.After(parent.ExpiresAt)) {
		return &FieldError{"expires_at", "must not be after the parent's"}
	}
	if k.Budget != nil && parent.Budget != nil && k.Budget.Amount > parent.Budget.Amount {
		// What the parent has left now is checked where spend is known
		// (the key API); its whole budget is the bound here.
		return &FieldError{"budget.amount", fmt.Sprintf("must be at most the parent's %v", parent.Budget.Amount)}
	}
	return nil
}

// validateBudget checks a key's budget against its tenant's: a key's
// spend counts toward the tenant's budget too, so it may not be larger,
// and a hard cap needs every target of the key's models priced, or spend
// served there would pass it.
func validateBudget(cfg *config.Config, t *config.Tenant, k *Key) error {
	b := k.Budget
	if tb := t.Budget; tb != nil && b.Amount > tb.Monthly {
		return &FieldError{"budget.amount", fmt.Sprintf("must be at most the tenant's monthly budget of %v", tb.Monthly)}
	}
	if !b.HardCap {
		return nil
	}
	for i := range cfg.Models {
		m := &cfg.Models[i]
		if !t.Allows(m.Name) || (len(k.Models) > 0 && !slices.Contains(k.Models, m.Name)) {
			continue
		}
		if tg, ok := config.UnpricedTarget(m); ok {
			return &FieldError{"budget.hard_cap", fmt.Sprintf("model %q has no price on its target on backend %q, so spend served there would never count toward the cap", m.Name, tg.Backend)}
		}
	}
	return nil
}

// Label bounds: labels travel into logs and, in phase 2, ledger entries.
const (
	MaxLabels        = 32
	MaxLabelNameLen  = 63
	MaxLabelValueLen = 256
)

func validateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return &FieldError{"labels", fmt.Sprintf("at most %d labels", MaxLabels)}
	}
	for n, v := range labels {
		switch {
		case n == "" || len(n) > MaxLabelNameLen || !printable(n) || strings.ContainsAny(n, "=,"):
			return &FieldError{"labels", fmt.Sprintf("label name %q: 1 to %d printable characters, no '=' or ','", n, MaxLabelNameLen)}
		case len(v) > MaxLabelValueLen || !printable(v):
			return &FieldError{"labels." + n, fmt.Sprintf("at most %d printable characters", MaxLabelValueLen)}
		}
	}
	return nil
}

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// newSecret returns a fresh plain key and id.
func newSecret() (plain, id string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("subkey: random: %w", err)
	}
	var i [8]byte
	if _, err := rand.Read(i[:]); err != nil {
		return "", "", fmt.Errorf("subkey: random: %w", err)
	}
	return plainPrefix + base64.RawURLEncoding.EncodeToString(b[:]), "sk_" + hex.EncodeToString(i[:]), nil
}
