package extproc_test

import (
	"context"
	"strconv"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/keypool"
	"github.com/swarmgate/swarmgate/internal/redistest"
	"github.com/swarmgate/swarmgate/internal/subkey"
	"github.com/swarmgate/swarmgate/internal/subkey/subkeytest"
)

// BenchmarkRouterExchangeKeys is the 2KB JSON exchange of
// BenchmarkRouterExchange authenticated three ways: a config key with
// sub-keys off, a config key with them on, and a sub-key (labelled).
func BenchmarkRouterExchangeKeys(b *testing.B) {
	cfg := benchConfig(b)
	pools, err := keypool.New(cfg, keypool.Options{})
	if err != nil {
		b.Fatal(err)
	}
	srv := redistest.Start(b)
	rdb := srv.Client()
	defer rdb.Close()
	store := subkeytest.Run(b, rdb, "b:subkey:")
	ctx := context.Background()
	_, plain, err := store.Create(ctx, subkey.Key{Tenant: "alpha", Labels: map[string]string{"run": "bench"}})
	if err != nil {
		b.Fatal(err)
	}
	reqB := benchBody(2<<10, false)
	body := reqBody(string(reqB))
	rh := respHeaders(false, ":status", "200", "content-type", "application/json", contract.HeaderBackend, "big", contract.HeaderUpstreamKey, "big-1")
	var msgs []*extprocv3.ProcessingRequest
	for _, c := range jsonResponse(2 << 10) {
		msgs = append(msgs, respBody(c, false))
	}
	msgs = append(msgs, respBody(nil, true))
	for _, tc := range []struct {
		name string
		auth extproc.Options
		key  string
	}{
		{"config-key/subkeys-off", extproc.Options{}, keyAlpha},
		{"config-key/subkeys-on", extproc.Options{Authenticator: subkey.Auth{Store: store}}, keyAlpha},
		{"sub-key", extproc.Options{Authenticator: subkey.Auth{Store: store}}, plain},
	} {
		opts := tc.auth
		opts.Config, opts.Keys, opts.Usage = cfg, wire.Keys(pools), wire.Usage()
		s, err := extproc.New(opts)
		if err != nil {
			b.Fatal(err)
		}
		headers := reqHeaders(false, chatHeaders(tc.key, "content-length", strconv.Itoa(len(reqB)))...)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				x := s.NewRouterExchange()
				x.Handle(ctx, headers)
				if r := x.Handle(ctx, body); r.GetRequestBody() == nil {
					b.Fatalf("refused: %s", r.GetImmediateResponse().GetBody())
				}
				x.Handle(ctx, rh)
				for _, m := range msgs {
					x.Handle(ctx, m)
				}
				x.End()
			}
		})
	}
}
