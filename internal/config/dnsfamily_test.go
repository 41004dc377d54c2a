package config

import (
	"slices"
	"testing"
)

func TestPickFamily(t *testing.T) {
	both := []string{"192.0.2.1", "2001:db8::1", "192.0.2.2", "::ffff:192.0.2.3"}
	v6 := []string{"2001:db8::1", "2001:db8::2"}
	for _, tt := range []struct {
		family string
		in     []string
		want   []string
	}{
		{DNSV4Preferred, both, []string{"192.0.2.1", "192.0.2.2", "::ffff:192.0.2.3"}},
		{DNSV4Preferred, v6, v6},
		{DNSV6Preferred, both, []string{"2001:db8::1"}},
		{DNSV6Preferred, []string{"192.0.2.1"}, []string{"192.0.2.1"}},
		{DNSV4Only, v6, nil},
		{DNSV6Only, both, []string{"2001:db8::1"}},
		{DNSAll, both, both},
	} {
		if got := PickFamily(tt.family, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("%s %v = %v, want %v", tt.family, tt.in, got, tt.want)
		}
	}
}
