package envoysim

import (
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// diffCases are the conformance scripts run on the sim and the binary.
func diffCases() []diffCase {
	var cs []diffCase
	cs = append(cs, basicCases()...)
	return cs
}

func oneCluster(e diffEnv, rf *Filter, uf *Filter, rp *RetryPolicy) Config {
	cfg := Config{Routes: []Route{{Name: "r", Cluster: "c", Retry: rp}}, RouterFilter: rf,
		Clusters: []Cluster{{Name: "c", UpstreamFilter: uf}}}
	for _, a := range e.up {
		cfg.Clusters[0].Endpoints = append(cfg.Clusters[0].Endpoints, Endpoint{Address: a})
	}
	return cfg
}

func wantStatus(code int) func(t *testing.T, o *observation) {
	return func(t *testing.T, o *observation) {
		if o.status != code {
			t.Errorf("status %d, want %d", o.status, code)
		}
	}
}

func basicCases() []diffCase {
	return []diffCase{
		{name: "plain request through both filters",
			config: func(e diffEnv) Config {
				return oneCluster(e, routerFilter(e.proc), upstreamFilter(e.proc, extprocfilter.ProcessingMode_NONE), nil)
			},
			req: diffRequest{header: map[string]string{"x-request-id": "plain"}, body: "hello"},
			check: func(t *testing.T, o *observation) {
				if o.status != 200 || o.body != "hello" || o.attempts() != 1 {
					t.Errorf("status %d body %q attempts %d", o.status, o.body, o.attempts())
				}
			}},
		// Behaviour 1.
		{name: "one header map per request",
			script: func(role string, n int, req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
				if role != "upstream" {
					return one(pass(req))
				}
				switch req.GetRequest().(type) {
				case *extprocv3.ProcessingRequest_RequestHeaders:
					return one(answerWith(req, &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
						RemoveHeaders: []string{"x-key-hint"},
						SetHeaders:    []*corev3.HeaderValueOption{setRaw("x-attempt-"+string(rune('0'+n)), "1"), setRaw(":path", "/attempt")}}}))
				case *extprocv3.ProcessingRequest_RequestBody:
					return one(answerWith(req, &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
						Mutation: &extprocv3.BodyMutation_Body{Body: []byte("MUTATED!")}}}))
				}
				return one(pass(req))
			},
			upstreams: []upstreamHandler{func(n int, w http.ResponseWriter, r *http.Request) {
				answer(map[bool]int{true: 429, false: 200}[n == 1])(n, w, r)
			}},
			config: func(e diffEnv) Config {
				cfg := Config{Routes: []Route{{Name: "r", Cluster: "c", Retry: retry429, AutoHostRewrite: true}},
					Clusters: []Cluster{{Name: "c", Endpoints: []Endpoint{{Address: e.up[0], Hostname: "api.example"}},
						UpstreamFilter: upstreamFilter(e.proc, extprocfilter.ProcessingMode_BUFFERED)}}}
				return cfg
			},
			req: diffRequest{header: map[string]string{"x-key-hint": "k1", "x-request-id": "one-map"}, body: "original"},
			check: func(t *testing.T, o *observation) {
				if o.status != 200 || o.attempts() != 2 {
					t.Fatalf("status %d attempts %d", o.status, o.attempts())
				}
				a2 := o.upstream[1]
				if a2.uri != "/attempt" || a2.header.Get("x-attempt-1") != "1" || a2.header.Get("x-key-hint") != "" || a2.host != "api.example" ||
					a2.body != "MUTATED!" {
					t.Errorf("attempt 2: %+v", a2)
				}
				if bs := o.messages("upstream", "request_body"); len(bs) != 2 || string(bs[1].req.GetRequestBody().GetBody()) != "original" {
					t.Errorf("attempt bodies %v", bs)
				}
			}},
	}
}

var (
	_ = strings.Repeat
	_ = time.Second
	_ = typev3.StatusCode_OK
)
