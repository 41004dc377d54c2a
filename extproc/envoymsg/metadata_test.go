package envoymsg

import (
	"testing"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// One RequestMeta serves request after request on a pooled stream: a
// sub-key limit is present exactly when the request's key has it.
func TestRequestMetaSubkeyLimitsAcrossReuse(t *testing.T) {
	var m RequestMeta
	for _, tc := range []struct {
		name string
		f    RequestFields
		want map[string]string
	}{
		{"sub-key rpm, rpd, tpm", RequestFields{SubkeyRPM: 3, SubkeyRPD: 100, SubkeyTPM: 20000},
			map[string]string{contract.MetaSubkeyRPM: "3", contract.MetaSubkeyRPD: "100", contract.MetaSubkeyTPM: "20000"}},
		{"config key after it", RequestFields{}, map[string]string{}},
		{"sub-key with rpd only", RequestFields{SubkeyRPD: 7}, map[string]string{contract.MetaSubkeyRPD: "7"}},
		{"same limit again", RequestFields{SubkeyRPD: 7}, map[string]string{contract.MetaSubkeyRPD: "7"}},
		{"another limit", RequestFields{SubkeyRPD: 8, SubkeyRPM: -1}, map[string]string{contract.MetaSubkeyRPD: "8"}},
		{"minted by a limited minter", RequestFields{ParentKey: "sk_m", ParentRPM: 30, ParentTPM: 9000},
			map[string]string{contract.MetaParentKey: "sk_m", contract.MetaParentRPM: "30", contract.MetaParentTPM: "9000"}},
		{"a minter without limits sends no id", RequestFields{ParentKey: "sk_m"}, map[string]string{}},
		{"limits without an id are not sent", RequestFields{ParentRPD: 5}, map[string]string{}},
		{"config key after them", RequestFields{}, map[string]string{}},
	} {
		ns := m.Fill(tc.f).GetFields()[contract.MetadataNamespace].GetStructValue().GetFields()
		for _, k := range []string{contract.MetaSubkeyRPM, contract.MetaSubkeyRPD, contract.MetaSubkeyTPM,
			contract.MetaParentKey, contract.MetaParentRPM, contract.MetaParentRPD, contract.MetaParentTPM} {
			v, sent := ns[k]
			want, wantSent := tc.want[k]
			if sent != wantSent || v.GetStringValue() != want {
				t.Errorf("%s: %s sent %v %q, want sent %v %q", tc.name, k, sent, v.GetStringValue(), wantSent, want)
			}
		}
		if ns[contract.MetaTenant] == nil {
			t.Errorf("%s: the other fields are gone", tc.name)
		}
	}
}

func BenchmarkRequestMetaFill(b *testing.B) {
	for _, tc := range []struct {
		name string
		f    RequestFields
	}{
		{"config key", RequestFields{Tenant: "t", VirtualKey: "k", EstTokens: 100}},
		{"sub-key with three limits", RequestFields{Tenant: "t", VirtualKey: "sk_1", EstTokens: 100, SubkeyRPM: 600, SubkeyRPD: 10000, SubkeyTPM: 200000}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var m RequestMeta
			b.ReportAllocs()
			for b.Loop() {
				m.Fill(tc.f)
			}
		})
	}
}
