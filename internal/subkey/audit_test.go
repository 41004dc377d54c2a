package subkey

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestAuditStreamIsCappedAndNewestFirst(t *testing.T) {
	s := startStores(t, 1)[0]
	ctx := context.Background()
	at := time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC)
	n := AuditCap + 1500
	for i := range n {
		e := Event{Time: at.Add(time.Duration(i) * time.Second), Actor: "admin", Action: "create",
			KeyID: fmt.Sprintf("sk_%d", i), Tenant: "demo", Outcome: "allowed", Status: 201}
		if err := s.Audit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	length, err := s.rdb.XLen(ctx, s.auditKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	// MAXLEN ~ trims whole macro nodes (100 entries by default).
	if length < AuditCap || length > AuditCap+200 {
		t.Fatalf("stream holds %d entries, want about %d", length, AuditCap)
	}
	got, err := s.RecentAudit(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := Event{Time: at.Add(time.Duration(n-1) * time.Second), Actor: "admin", Action: "create",
		KeyID: fmt.Sprintf("sk_%d", n-1), Tenant: "demo", Outcome: "allowed", Status: 201}
	if len(got) != 2 || got[0] != want || got[1].KeyID != fmt.Sprintf("sk_%d", n-2) {
		t.Fatalf("newest entries %+v, want %+v first", got, want)
	}
}
