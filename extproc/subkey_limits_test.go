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
	h := newHarness(t, testConfig(t), func(o *extproc.Options) { o.Authenticator = subkey.Auth{Store: store} })
	for _, tc := range []struct {
		name, key string
		want      map[string]string // absent: not sent
	}{
		{"sub-key with rpm and tpm", limited, map[string]string{contract.MetaSubkeyRPM: "3", contract.MetaSubkeyTPM: "1500"}},
		{"sub-key without limits", unlimited, map[string]string{}},
		{"config key", keyAlpha, map[string]string{}},
		{"sub-key again", limited, map[string]string{contract.MetaSubkeyRPM: "3", contract.MetaSubkeyTPM: "1500"}},
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
			for _, k := range []string{contract.MetaSubkeyRPM, contract.MetaSubkeyRPD, contract.MetaSubkeyTPM} {
				v, sent := ns[k]
				want, wantSent := tc.want[k]
				if sent != wantSent || v.GetStringValue() != want {
					t.Errorf("%s: sent %v %q, want sent %v %q", k, sent, v.GetStringValue(), wantSent, want)
				}
			}
		})
	}
}
