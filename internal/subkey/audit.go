package subkey

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// AuditCap is about how many entries the audit stream keeps (MAXLEN ~):
// Redis trims whole macro nodes, so a few more may stay.
const AuditCap = 10000

// Event is one key operation, allowed or refused. It names keys by id
// only: neither the plain key nor its hash is ever part of it.
type Event struct {
	Time time.Time `json:"time"`
	// Actor is "admin" or the id of the minter key that asked.
	Actor  string `json:"actor"`
	Action string `json:"action"` // create, update, revoke
	KeyID  string `json:"key_id,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	// Outcome is "allowed" or "refused"; Status the HTTP status answered.
	Outcome string `json:"outcome"`
	Status  int    `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Field   string `json:"field,omitempty"`
}

func (s *Store) auditKey() string { return s.prefix + "audit" }

// Audit appends e to the capped stream <prefix>audit.
func (s *Store) Audit(ctx context.Context, e Event) error {
	err := s.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: s.auditKey(),
		MaxLen: AuditCap,
		Approx: true,
		Values: []any{
			"time", e.Time.UTC().Format(time.RFC3339Nano), "actor", e.Actor, "action", e.Action,
			"key_id", e.KeyID, "tenant", e.Tenant, "outcome", e.Outcome,
			"status", strconv.Itoa(e.Status), "reason", e.Reason, "field", e.Field,
		},
	}).Err()
	if err != nil {
		return fmt.Errorf("subkey: audit: %w", err)
	}
	return nil
}

// RecentAudit returns the newest n entries of the audit stream, newest first.
func (s *Store) RecentAudit(ctx context.Context, n int) ([]Event, error) {
	msgs, err := s.rdb.XRevRangeN(ctx, s.auditKey(), "+", "-", int64(n)).Result()
	if err != nil {
		return nil, fmt.Errorf("subkey: read audit: %w", err)
	}
	out := make([]Event, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, eventOf(m.Values))
	}
	return out, nil
}

func eventOf(v map[string]any) Event {
	str := func(k string) string { s, _ := v[k].(string); return s }
	e := Event{Actor: str("actor"), Action: str("action"), KeyID: str("key_id"), Tenant: str("tenant"),
		Outcome: str("outcome"), Reason: str("reason"), Field: str("field")}
	e.Time, _ = time.Parse(time.RFC3339Nano, str("time"))
	e.Status, _ = strconv.Atoi(str("status"))
	return e
}
