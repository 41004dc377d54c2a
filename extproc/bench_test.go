package extproc_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/swarmgate/swarmgate/extproc"
	"github.com/swarmgate/swarmgate/extproc/wire"
	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/keypool"
)

// benchBody is a chat request of about n bytes.
func benchBody(n int, stream bool) []byte {
	content := strings.Repeat("lorem ipsum ", max(1, (n-120)/12))
	s := `{"model":"chat","stream":` + strconv.FormatBool(stream) + `,"max_tokens":100,"messages":[{"role":"user","content":"` + content + `"}]}`
	return []byte(s)
}

// sseResponse is a stream of about n bytes of content chunks plus the usage
// chunk, cut into 16 KiB transport chunks.
func sseResponse(n int) [][]byte {
	return sseEvents(n, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hello world "}}]}`+"\n\n")
}

// sseNamedResponse is sseResponse with the model named in every event, as
// providers send it.
func sseNamedResponse(n int) [][]byte {
	return sseEvents(n, `data: {"id":"c","object":"chat.completion.chunk","model":"vendor/chat-large","choices":[{"index":0,"delta":{"content":"hello world "}}]}`+"\n\n")
}

func sseEvents(n int, ev string) [][]byte {
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(ev)
	}
	b.WriteString(`data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":50,"total_tokens":150}}` + "\n\ndata: [DONE]\n\n")
	return split(b.Bytes(), 16<<10)
}

func jsonResponse(n int) [][]byte {
	content := strings.Repeat("x", max(1, n-200))
	s := `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` + content +
		`"},"finish_reason":"stop"}],"usage":{"prompt_tokens":100,"completion_tokens":50,"total_tokens":150}}`
	return split([]byte(s), 16<<10)
}

func split(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

func benchConfig(b *testing.B) *config.Config {
	cfg := testConfig(b)
	cfg.Request.MaxBodyBytes = config.ByteSize(8 << 20)
	for i := range cfg.Models {
		for j := range cfg.Models[i].Targets {
			cfg.Models[i].Targets[j].ContextWindow = 0
		}
	}
	return cfg
}

// BenchmarkRouterExchange is the ext_proc work of one request at router
// level, without gRPC: request headers, buffered body, response headers,
// response body chunks (16 KiB) with usage parsing, end of stream with
// dynamic metadata and accounting calls.
func BenchmarkRouterExchange(b *testing.B) {
	cfg := benchConfig(b)
	pools, err := keypool.New(cfg, keypool.Options{})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := extproc.New(extproc.Options{Config: cfg, Keys: wire.Keys(pools), Usage: wire.Usage()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, size := range []struct {
		name string
		n    int
	}{{"2KB", 2 << 10}, {"64KB", 64 << 10}, {"1MB", 1 << 20}} {
		// sse-model: every event names the model; "big" is asked for
		// vendor/chat-large, renamed to the alias in each event. Its
		// -asis twin is answered by "small", asked for the alias itself.
		for _, kind := range []string{"json", "sse", "sse-model", "sse-model-asis"} {
			stream := kind != "json"
			reqB := benchBody(size.n, stream)
			var chunks [][]byte
			ctype := "application/json"
			switch kind {
			case "sse":
				chunks, ctype = sseResponse(size.n), "text/event-stream"
			case "sse-model", "sse-model-asis":
				chunks, ctype = sseNamedResponse(size.n), "text/event-stream"
			default:
				chunks = jsonResponse(size.n)
			}
			backend := "big"
			if kind == "sse-model-asis" {
				backend = "small"
			}
			headers := reqHeaders(false, chatHeaders(keyAlpha, "content-length", strconv.Itoa(len(reqB)))...)
			body := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: reqB, EndOfStream: true}}}
			rh := respHeaders(false, ":status", "200", "content-type", ctype, contract.HeaderBackend, backend, contract.HeaderUpstreamKey, backend+"-1")
			var msgs []*extprocv3.ProcessingRequest
			for _, c := range chunks {
				msgs = append(msgs, respBody(c, false))
			}
			msgs = append(msgs, respBody(nil, true))
			total := int64(len(reqB))
			for _, c := range chunks {
				total += int64(len(c))
			}
			b.Run(size.name+"/"+kind, func(b *testing.B) {
				b.SetBytes(total)
				b.ReportAllocs()
				for b.Loop() {
					x := srv.NewRouterExchange()
					x.Handle(ctx, headers)
					if r := x.Handle(ctx, body); r.GetRequestBody() == nil {
						b.Fatalf("refused: %s", r.GetImmediateResponse().GetBody())
					}
					x.Handle(ctx, rh)
					var last *extprocv3.ProcessingResponse
					for _, m := range msgs {
						last = x.Handle(ctx, m)
					}
					if last.GetDynamicMetadata() == nil {
						b.Fatal("no usage metadata")
					}
					x.End()
				}
			})
		}
	}
}

// BenchmarkRouterExchangeGRPC is the same exchange over a real gRPC stream
// on loopback, as Envoy drives it (marshalling and one round trip per
// message included).
func BenchmarkRouterExchangeGRPC(b *testing.B) {
	cfg := benchConfig(b)
	h := newHarness(b, cfg)
	for _, size := range []struct {
		name string
		n    int
	}{{"2KB", 2 << 10}, {"64KB", 64 << 10}} {
		for _, kind := range []string{"json", "sse"} {
			stream := kind == "sse"
			reqB := benchBody(size.n, stream)
			chunks, ctype := jsonResponse(size.n), "application/json"
			if stream {
				chunks, ctype = sseResponse(size.n), "text/event-stream"
			}
			msgs := []*extprocv3.ProcessingRequest{
				reqHeaders(false, chatHeaders(keyAlpha, "content-length", strconv.Itoa(len(reqB)))...),
				{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: reqB, EndOfStream: true}}},
				respHeaders(false, ":status", "200", "content-type", ctype),
			}
			for _, c := range chunks {
				msgs = append(msgs, respBody(c, false))
			}
			msgs = append(msgs, respBody(nil, true))
			b.Run(size.name+"/"+kind, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					st, cancel := h.stream(b, contract.RoleRouter)
					var last *extprocv3.ProcessingResponse
					for _, m := range msgs {
						last = roundTrip(b, st, m)
					}
					if last.GetDynamicMetadata() == nil {
						b.Fatal("no usage metadata")
					}
					_ = st.CloseSend()
					cancel()
				}
			})
		}
	}
}
