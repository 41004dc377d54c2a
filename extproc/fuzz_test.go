package extproc_test

import (
	"context"
	"encoding/json"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/keypool"
)

// FuzzRouterRequestBody feeds random bodies to the router-level request
// path: it must never panic and always answer with a valid message: a body
// response, or an ImmediateResponse with a status and an OpenAI-shaped
// JSON error.
func FuzzRouterRequestBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"chat","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"chat","stream":true,"messages":[]}`,
		`{"model":"chat","stream":true,"stream_options":null}`,
		`{"model":"chat","stream":true,"stream_options":{"include_usage":false}}`,
		`{"model":"agent","tools":[{"type":"function"}],"max_tokens":9999}`,
		`{"model":"chat","model":"agent"}`,
		`{"model":"\u0063hat","max_tokens":-1}`,
		`[1,2,3]`, `{`, ``, `{"model":"chat","messages":[{"content":"` + "\xff\xfe" + `"}]}`,
	} {
		f.Add([]byte(s))
	}
	cfg := testConfig(f)
	pools, err := keypool.New(cfg, keypool.Options{})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := extproc.New(extproc.Options{Config: cfg, Keys: wire.Keys(pools), Usage: wire.Usage(), Reserver: newCapture()})
	if err != nil {
		f.Fatal(err)
	}
	headers := reqHeaders(false, chatHeaders(keyAlpha)...)
	f.Fuzz(func(t *testing.T, body []byte) {
		x := srv.NewRouterExchange()
		defer x.End()
		ctx := context.Background()
		if r := x.Handle(ctx, headers); r.GetRequestHeaders() == nil {
			t.Fatalf("headers refused: %v", r)
		}
		resp := x.Handle(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}})
		switch {
		case resp.GetRequestBody() != nil:
			cr := resp.GetRequestBody().GetResponse()
			if !cr.GetClearRouteCache() {
				t.Fatal("admitted without clear_route_cache")
			}
			if nb := cr.GetBodyMutation().GetBody(); nb != nil && !json.Valid(nb) {
				t.Fatalf("mutated body is not JSON: %q", nb)
			}
		case resp.GetImmediateResponse() != nil:
			ir := resp.GetImmediateResponse()
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if code := ir.GetStatus().GetCode(); code < 400 || code > 599 {
				t.Fatalf("status %v", code)
			}
			if err := json.Unmarshal(ir.GetBody(), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("error body %q: %v", ir.GetBody(), err)
			}
		default:
			t.Fatalf("invalid response %v", resp)
		}
	})
}
