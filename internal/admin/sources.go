package admin

import (
	"context"
	"time"
)

// Breaker states as /keys reports them.
const (
	BreakerClosed   = "closed"    // key in rotation
	BreakerOpen     = "open"      // key out of rotation until OpenUntil
	BreakerHalfOpen = "half-open" // probe requests allowed
)

// KeyState is one upstream API key's pool and breaker state, by key id;
// never the key itself. Its fields match keypool.KeyState one for one, so
// the integrator adapts a snapshot with a plain conversion,
// admin.KeyState(k).
type KeyState struct {
	Backend        string    `json:"backend"`
	KeyID          string    `json:"key_id"`
	Weight         int       `json:"weight"`
	State          string    `json:"state"`            // BreakerClosed, BreakerOpen, BreakerHalfOpen
	Reason         string    `json:"reason,omitempty"` // why it opened: "429", "5xx", "quota"
	Consecutive429 int       `json:"consecutive_429"`
	Consecutive5xx int       `json:"consecutive_5xx"` // 5xx and resets
	Trips          int       `json:"trips"`           // times opened
	OpenUntil      time.Time `json:"open_until,omitzero"`
	InFlight       int       `json:"in_flight"`
	Picks          uint64    `json:"picks"`
	LastStatus     int       `json:"last_status"` // last upstream HTTP status seen; 0: none yet
}

// KeySource reports every key's state. The key pool implements it (or the
// integrator adapts it with KeySourceFunc).
type KeySource interface {
	KeyStates(ctx context.Context) ([]KeyState, error)
}

// KeySourceFunc adapts a function to KeySource.
type KeySourceFunc func(ctx context.Context) ([]KeyState, error)

// KeyStates calls f.
func (f KeySourceFunc) KeyStates(ctx context.Context) ([]KeyState, error) { return f(ctx) }

// BudgetState is one tenant's spend in the current budget period.
type BudgetState struct {
	Tenant   string  `json:"tenant"`
	Period   string  `json:"period"` // "2026-12" (calendar month, UTC)
	Spent    float64 `json:"spent"`
	Limit    float64 `json:"limit"` // monthly budget; 0: none
	Currency string  `json:"currency"`
	HardCap  bool    `json:"hard_cap"`
	// AlertsFired are the alert percentages already fired this period.
	AlertsFired []float64 `json:"alerts_fired,omitempty"`
}

// BudgetSource reports budget burn per tenant. Accounting implements it.
type BudgetSource interface {
	Budgets(ctx context.Context) ([]BudgetState, error)
}

// BudgetSourceFunc adapts a function to BudgetSource.
type BudgetSourceFunc func(ctx context.Context) ([]BudgetState, error)

// Budgets calls f.
func (f BudgetSourceFunc) Budgets(ctx context.Context) ([]BudgetState, error) { return f(ctx) }

// QueueState is this replica's admission queue: its local waiters (not the
// shared order's, which would cost a Redis call per poll) and how waits
// ended since the process started.
type QueueState struct {
	Waiting  int           `json:"waiting"`
	MaxQueue int           `json:"max_queue"`
	Scopes   []QueueScope  `json:"scopes"`
	Counters QueueCounters `json:"counters"`
}

// QueueScope is one scope of the queue: a set of target backends, or a
// tenant's (or tenant x model's) TPM reservation window.
type QueueScope struct {
	Scope             string         `json:"scope"`
	Depth             int            `json:"depth"`
	Waiters           []QueueWaiters `json:"waiters"`
	OldestWaitSeconds float64        `json:"oldest_wait_seconds"`
}

// QueueWaiters counts one tenant's waiters in one class. Its fields match
// admission.Waiters one for one (admin.QueueWaiters(w) converts).
type QueueWaiters struct {
	Tenant    string `json:"tenant"`
	Class     int    `json:"class"`
	ClassName string `json:"class_name,omitempty"`
	Count     int    `json:"count"`
}

// QueueCounters are how waits ended, every scope together. Its fields
// match admission.Counters one for one.
type QueueCounters struct {
	AdmittedAfterWait uint64 `json:"admitted_after_wait"`
	TimedOut          uint64 `json:"timed_out"`
	Cancelled         uint64 `json:"cancelled"`
	TooLong           uint64 `json:"too_long"`
	Full              uint64 `json:"full"`
	OrderDown         uint64 `json:"order_down"`
}

// QueueSource reports the admission queue. The integrator adapts
// admission.Queue.Snapshot with QueueSourceFunc.
type QueueSource interface {
	QueueState(ctx context.Context) (QueueState, error)
}

// QueueSourceFunc adapts a function to QueueSource.
type QueueSourceFunc func(ctx context.Context) (QueueState, error)

// QueueState calls f.
func (f QueueSourceFunc) QueueState(ctx context.Context) (QueueState, error) { return f(ctx) }
