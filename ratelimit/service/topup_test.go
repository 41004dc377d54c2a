package service_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/ratelimit/rlstest"
	"github.com/swarmgate/swarmgate/ratelimit/service"
	"github.com/swarmgate/swarmgate/test/rlsim"
	"github.com/swarmgate/swarmgate/xds/ir"
	"github.com/swarmgate/swarmgate/xds/translator"
)

// topUpYAML: tenant t1 at 10000 TPM, 5000 TPM on model m1, token limits
// charged by the rate-limit filter, sub-keys on.
const topUpYAML = `
accounting:
  token_limits: ratelimit
failure_modes:
  ratelimit: open
subkeys:
  enabled: true
backends:
  - name: b1
    base_url: http://127.0.0.1:9/v1
    keys:
      - {id: k1, secret: env:K1}
models:
  - name: m1
    targets: [{backend: b1}]
tenants:
  - name: t1
    keys: [{id: t1-1, hash: "sha256:1111111111111111111111111111111111111111111111111111111111111111"}]
    models: ["*"]
    limits: {rpm: 600, tpm: 10000}
    model_limits:
      m1: {tpm: 5000}
`

// The stream-end call charges every token descriptor its top-up, even when
// one of them crosses its limit: those tokens were used. A sub-key of 1000
// TPM (minted by a key of 100000 TPM) sends 500 estimated tokens, then a
// top-up of 1500 that takes its own window past the limit; the tenant's,
// the model's and the minter's windows must hold all 2000 too. The
// descriptors are the ones the control plane generates (rlsim models
// Envoy's filter). The next request is refused at request time by the
// sub-key and charges no other window, as before.
func TestStreamEndTopUpChargesEveryWindow(t *testing.T) {
	e := startYAML(t, topUpYAML, service.Options{})
	f, err := rlsim.New(translator.RateLimitFilter(ir.Build(e.cfg)), e.rls)
	if err != nil {
		t.Fatal(err)
	}
	rlstest.AvoidWindowEdge(t, 10*time.Second)
	ctx := context.Background()
	meta := func(extra ...any) *rlsim.Request {
		f := map[string]*structpb.Value{
			contract.MetaTenant:     structpb.NewStringValue("t1"),
			contract.MetaModel:      structpb.NewStringValue("m1"),
			contract.MetaVirtualKey: structpb.NewStringValue("sk_worker"),
			contract.MetaSubkeyTPM:  structpb.NewStringValue("1000"),
			contract.MetaParentKey:  structpb.NewStringValue("sk_minter"),
			contract.MetaParentTPM:  structpb.NewStringValue("100000"),
			contract.MetaEstTokens:  structpb.NewNumberValue(500),
		}
		for i := 0; i+1 < len(extra); i += 2 {
			f[extra[i].(string)] = structpb.NewNumberValue(float64(extra[i+1].(int)))
		}
		return &rlsim.Request{Headers: http.Header{}, DynamicMetadata: map[string]*structpb.Struct{contract.MetadataNamespace: {Fields: f}}}
	}
	used := func(pattern string) int {
		t.Helper()
		keys, err := e.redis.Client().Keys(ctx, pattern).Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("counter keys %q: %v %v", pattern, keys, err)
		}
		n, err := e.redis.Client().Get(ctx, keys[0]).Int()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	windows := []struct {
		name, pattern string
	}{
		{"tenant", "*_tenant_t1_limit_tpm_*"},
		{"model", "*_tenant_t1_model_m1_limit_tpm_*"},
		{"sub-key", "*_subkey_sk_worker_limit_tpm_*"},
		{"minter", "*_subkey_sk_minter_limit_tpm_*"},
	}
	// check wants 500 estimated + 1500 top-up in every window; a refused
	// request's estimate is in none (given back by the descriptor that
	// refused it; docs/ratelimit.md).
	check := func(when string) {
		t.Helper()
		for _, w := range windows {
			want := 2000
			if got := used(w.pattern); got != want {
				t.Errorf("%s: %s TPM window holds %d tokens, want %d", when, w.name, got, want)
			}
		}
	}

	if res := f.DecodeHeaders(ctx, meta()); res.Err != nil || res.LocalReply {
		t.Fatalf("request time: err %v, refused %v (%v)", res.Err, res.LocalReply, res.Response)
	}
	sd := f.OnStreamDone(ctx, meta(contract.MetaTokensTopUp, 1500))
	if sd.Err != nil {
		t.Fatal(sd.Err)
	}
	if n := len(sd.Request.GetDescriptors()); n != len(windows) {
		t.Fatalf("stream end sent %d descriptors, want %d: %v", n, len(windows), sd.Request)
	}
	if sd.Response.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("stream end answered %v, want OVER_LIMIT (the sub-key crossed its limit)", sd.Response.GetOverallCode())
	}
	check("after the top-up")

	if res := f.DecodeHeaders(ctx, meta()); res.Err != nil || !res.LocalReply {
		t.Fatalf("request over the sub-key's spent window: err %v, refused %v, want refused", res.Err, res.LocalReply)
	}
	check("after a refused request")
}
