package subkey

import (
	"context"
	"errors"
	"testing"
)

// An update that read the key before another replica revoked it must not
// save it back unrevoked (a leaked key revoked while automation edits its
// labels); the update is applied again on the revoked key.
func TestUpdateAfterConcurrentRevoke(t *testing.T) {
	stores := startStores(t, 2)
	a, b := stores[0], stores[1]
	ctx := context.Background()
	k, _, err := a.Create(ctx, Key{Tenant: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	got, err := a.Update(ctx, k.ID, func(k *Key) error {
		calls++
		if calls == 1 {
			if _, err := b.Revoke(ctx, k.ID); err != nil {
				t.Fatal(err)
			}
		}
		k.Labels = map[string]string{"run": "r1"}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || !got.Revoked || got.Labels["run"] != "r1" {
		t.Fatalf("calls %d, key %+v", calls, got)
	}
	stored, err := b.Get(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !stored.Revoked || stored.Labels["run"] != "r1" {
		t.Fatalf("stored %+v", stored)
	}
}

func TestUpdateKeepsRevocation(t *testing.T) {
	s := startStores(t, 1)[0]
	ctx := context.Background()
	k, _, _ := s.Create(ctx, Key{Tenant: "demo"})
	if _, err := s.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	got, err := s.Update(ctx, k.ID, func(k *Key) error { k.Revoked = false; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if stored, _ := s.Get(ctx, k.ID); !got.Revoked || !stored.Revoked {
		t.Fatalf("updated %+v, stored %+v", got, stored)
	}
}

// A key that changes on every read gives up with ErrConflict instead of
// looping.
func TestUpdateConflict(t *testing.T) {
	stores := startStores(t, 2)
	a, b := stores[0], stores[1]
	ctx := context.Background()
	k, _, _ := a.Create(ctx, Key{Tenant: "demo"})
	n := 0
	_, err := a.Update(ctx, k.ID, func(*Key) error {
		n++
		_, err := b.Update(ctx, k.ID, func(k *Key) error { k.Labels = map[string]string{"n": string(rune('a' + n))}; return nil })
		return err
	})
	if !errors.Is(err, ErrConflict) || n != updateAttempts {
		t.Fatalf("err %v after %d attempts", err, n)
	}
	if _, err := a.Update(ctx, "sk_none", func(*Key) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing key: %v", err)
	}
}
