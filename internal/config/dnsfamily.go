package config

import "net"

// The values of envoy.dns_lookup_family.
const (
	DNSV4Preferred = "v4_preferred"
	DNSV6Preferred = "v6_preferred"
	DNSV4Only      = "v4_only"
	DNSV6Only      = "v6_only"
	DNSAll         = "all"
)

// DNSLookupFamilies lists the accepted envoy.dns_lookup_family values.
var DNSLookupFamilies = []string{DNSV4Preferred, DNSV6Preferred, DNSV4Only, DNSV6Only, DNSAll}

// PickFamily keeps the addresses of a host name's lookup that family
// chooses: a preferred family's addresses when it has any, else the
// other's; one family only; or all. A resolver answers both families, and
// Envoy connects to whichever address it is given: in a deployment without
// IPv6 (most Kubernetes clusters) an AAAA answer in EDS made a share of
// the attempts fail to connect.
func PickFamily(family string, ips []string) []string {
	var v4, v6 []string
	for _, ip := range ips {
		if p := net.ParseIP(ip); p != nil && p.To4() != nil {
			v4 = append(v4, ip)
		} else {
			v6 = append(v6, ip)
		}
	}
	switch family {
	case DNSV4Only:
		return v4
	case DNSV6Only:
		return v6
	case DNSV6Preferred:
		if len(v6) > 0 {
			return v6
		}
		return v4
	case DNSAll:
		return ips
	default: // v4_preferred
		if len(v4) > 0 {
			return v4
		}
		return v6
	}
}
