package extproc_test

import (
	"testing"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/subkey"
)

// A sub-key's own limits reach the rate-limit filter as dynamic metadata
// with the request-body answer, each only when set; a config key carries
// none, so Envoy sends no sub-key descriptor for it.
func TestSubkeyLimitsInMetadata(t *testing.T) {
	store := subkeyStore(t)
	_, limited, err := store.Create(t.Context(), subkey.Key{Tenant: "alpha", Limits: config.Limits{RPM: 3, TPM: 1500}})
	if err != nil {
		t.Fatal(err)
	}
	_, unlimited, err := store.Create(t.Context(), subkey.Key{Tenant: "alpha"})
	if err != nil {
		t.Fatal(err)
	}
	// A minter with limits, and a key it minted without any of its own:
	// the minter's limits bound the minted key's requests too.
	minter, minterPlain, err := store.Create(t.Context(), subkey.Key{Tenant: "alpha", Minter: true, Limits: config.Limits{RPM: 30, RPD: 500}})
	if err != nil {
		t.Fatal(err)
	}
	_, minted, err := store.Create(t.Context(), subkey.Key{Tenant: "alpha", Parent: minter.ID, Limits: config.Limits{RPM: 10, RPD: 100, TPM: 800}})
	if err != nil {
		t.Fatal(err)
	}
	_, underConfigKey, err := store.Create(t.Context(), subkey.Key{Tenant: "alpha", Parent: "alpha-1"})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, testConfig(t), func(o *extproc.Options) { o.Authenticator = subkey.Auth{Store: store} })
	for _, tc := range []struct {
		name, key string
		want      map[string]string // absent: not sent
	}{
		{"sub-key with rpm and tpm", limited, map[string]string{contract.MetaSubkeyRPM: "3", contract.MetaSubkeyTPM: "1500"}},
		{"sub-key without limits", unlimited, map[string]string{}},
		{"config key", keyAlpha, map[string]string{}},
		{"sub-key again", limited, map[string]string{contract.MetaSubkeyRPM: "3", contract.MetaSubkeyTPM: "1500"}},
		{"minted by a limited minter", minted, map[string]string{contract.MetaSubkeyRPM: "10", contract.MetaSubkeyRPD: "100", contract.MetaSubkeyTPM: "800",
			contract.MetaParentKey: minter.ID, contract.MetaParentRPM: "30", contract.MetaParentRPD: "500"}},
		{"the minter itself", minterPlain, map[string]string{contract.MetaSubkeyRPM: "30", contract.MetaSubkeyRPD: "500"}},
		{"minted by a config key", underConfigKey, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, cancel := h.stream(t, contract.RoleRouter)
			defer cancel()
			roundTrip(t, st, reqHeaders(false, chatHeaders(tc.key)...))
			resp := roundTrip(t, st, reqBody(`{"model":"chat","messages":[{"role":"user","content":"hello"}]}`))
			if resp.GetRequestBody() == nil {
				t.Fatalf("not admitted: %v", resp)
			}
			ns := resp.GetDynamicMetadata().GetFields()[contract.MetadataNamespace].GetStructValue().GetFields()
			for _, k := range []string{contract.MetaSubkeyRPM, contract.MetaSubkeyRPD, contract.MetaSubkeyTPM,
				contract.MetaParentKey, contract.MetaParentRPM, contract.MetaParentRPD, contract.MetaParentTPM} {
				v, sent := ns[k]
				want, wantSent := tc.want[k]
				if sent != wantSent || v.GetStringValue() != want {
					t.Errorf("%s: sent %v %q, want sent %v %q", k, sent, v.GetStringValue(), wantSent, want)
				}
			}
		})
	}
}
