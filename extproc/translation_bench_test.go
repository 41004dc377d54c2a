package extproc_test

import (
	"context"
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// BenchmarkTranslatedRequest is the request side of a Messages request to
// a model whose chat targets take it translated: the router-level body
// (which translates once to check) and the first attempt's headers and
// body, without gRPC. "reused": the attempt goes to the target the
// router translated for and sends that translation; "translated": its
// target names another upstream model, so it translates again (what
// every first attempt did before).
func BenchmarkTranslatedRequest(b *testing.B) {
	env := map[string]string{"R": "r", "O": "o", "A": "a"}
	cfg, err := config.Parse([]byte(strings.Replace(translationYAML, "HASH", config.HashKey(keyAlpha), 1)), "t.yaml",
		config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		b.Fatal(err)
	}
	cfg.Request.MaxBodyBytes = config.ByteSize(8 << 20)
	for i := range cfg.Models[0].Targets {
		cfg.Models[0].Targets[i].ContextWindow = 0
	}
	h := newHarness(b, cfg)
	ctx := context.Background()
	headers := []string{":method", "POST", ":path", "/v1/messages", ":authority", "gw", "authorization", "Bearer " + keyAlpha,
		"anthropic-version", "2023-06-01", "content-type", "application/json"}
	for _, size := range []struct {
		name string
		n    int
	}{{"2KB", 2 << 10}, {"64KB", 64 << 10}} {
		turn := `{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 40) + `"},{"role":"assistant","content":"ok"},`
		body := `{"model":"m","max_tokens":100,"tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[` +
			strings.Repeat(turn, max(1, size.n/len(turn))) + `{"role":"user","content":"go on"}]}`
		for _, c := range []struct{ name, model string }{{"reused", "m"}, {"translated", "other"}} {
			b.Run(size.name+"/"+c.name, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					x := h.srv.NewRouterExchange()
					x.Handle(ctx, reqHeaders(false, headers...))
					resp := x.Handle(ctx, reqBody(body))
					md := resp.GetDynamicMetadata().GetFields()[contract.AdmissionNamespace].GetStructValue()
					if md == nil {
						b.Fatalf("not admitted: %v", resp)
					}
					u := h.srv.NewUpstreamExchange()
					u.Handle(ctx, upstreamReq(b, "relay", c.model, 1, false, md, headers...))
					if r := u.Handle(ctx, reqBody(body)); len(r.GetRequestBody().GetResponse().GetBodyMutation().GetBody()) == 0 {
						b.Fatalf("attempt not translated: %v", r)
					}
					x.End()
				}
			})
		}
	}
}
