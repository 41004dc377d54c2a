package subkey

import (
	"fmt"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/config"
)

// loaded returns a store whose cache holds n keys (the first expiring of
// them expire at expiry) and the plain text of the last one.
func loaded(n, expiring int, expiry time.Time) (*Store, string) {
	s := NewStore(nil, "", nil)
	keys := make([]*Key, n)
	var plain string
	for i := range keys {
		plain = fmt.Sprintf("sk-bench-%d", i)
		keys[i] = &Key{ID: fmt.Sprint(i), Tenant: "demo", Hash: config.HashKey(plain)}
		if i < expiring {
			keys[i].ExpiresAt = expiry
		}
	}
	s.cache.replace(keys)
	return s, plain
}

func BenchmarkAuthConfigKeyOnly(b *testing.B) {
	cfg := testConfig(b)
	a := Auth{}
	b.ReportAllocs()
	for b.Loop() {
		if _, r := a.Authenticate(cfg, "sk-swarmgate-demo"); r != OK {
			b.Fatal(r)
		}
	}
}

func BenchmarkAuthSubKey100k(b *testing.B) {
	cfg := testConfig(b)
	s, plain := loaded(100_000, 0, time.Time{})
	a := Auth{Store: s}
	b.ReportAllocs()
	for b.Loop() {
		if _, r := a.Authenticate(cfg, plain); r != OK {
			b.Fatal(r)
		}
	}
}

// BenchmarkAuth10kExpireAtOnce looks up keys after 10,000 of 100,000 have
// expired together: expiry is a comparison at lookup, nothing sweeps.
func BenchmarkAuth10kExpireAtOnce(b *testing.B) {
	cfg := testConfig(b)
	now := time.Now()
	s, _ := loaded(100_000, 10_000, now)
	a := Auth{Store: s, Now: func() time.Time { return now.Add(time.Second) }}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		want := OK
		if i%20_000 < 10_000 {
			want = Expired
		}
		if _, r := a.Authenticate(cfg, fmt.Sprintf("sk-bench-%d", i%20_000)); r != want {
			b.Fatal(r)
		}
		i++
	}
}
