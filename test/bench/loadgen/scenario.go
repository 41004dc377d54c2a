package loadgen

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// Scenario is the chat-completion exchange every request replays.
type Scenario struct {
	// Kind is "json" (non-streamed response) or "sse" (stream: true).
	Kind string `json:"kind"`
	// RequestBytes is the approximate size of the request body.
	RequestBytes int `json:"request_bytes"`
	// ResponseBytes is the approximate size of the response body.
	ResponseBytes int `json:"response_bytes"`
	// ChunkBytes cuts the response body into messages of this size. Zero:
	// one SSE event per message (as a token-streaming upstream writes
	// them), 16 KiB for JSON.
	ChunkBytes int `json:"chunk_bytes"`
	// RenameModel makes the target's upstream model differ from the alias:
	// the upstream stream then asks for the body (mode override) and the
	// model is rewritten per attempt.
	RenameModel bool `json:"rename_model"`
}

func (s Scenario) withDefaults() (Scenario, error) {
	if s.Kind == "" {
		s.Kind = "sse"
	}
	if s.Kind != "json" && s.Kind != "sse" {
		return s, fmt.Errorf("loadgen: scenario kind %q: want json or sse", s.Kind)
	}
	if s.RequestBytes <= 0 {
		s.RequestBytes = 4 << 10
	}
	if s.ResponseBytes <= 0 {
		s.ResponseBytes = 2 << 10
	}
	if s.ChunkBytes <= 0 && s.Kind == "json" {
		s.ChunkBytes = 16 << 10
	}
	return s, nil
}

// Names of the bench config (BenchConfig) the messages refer to.
const (
	VirtualKey    = "sk-bench-0123456789"
	benchTenant   = "bench"
	benchKeyID    = "bench-1"
	benchModel    = "chat"
	benchBackend  = "openai"
	renamedModel  = "vendor/chat-large"
	benchUpKeyID  = "openai-1"
	attrNamespace = "envoy.filters.http.ext_proc"
)

// exchange is the fixed part of one request's messages. Workers copy it
// (messages) so each can write its own request id.
type exchange struct {
	sc        Scenario
	reqBody   []byte
	chunks    [][]byte
	ctype     string
	estTokens int
}

func newExchange(sc Scenario) *exchange {
	x := &exchange{sc: sc, reqBody: requestBody(sc.RequestBytes, sc.Kind == "sse")}
	if sc.Kind == "sse" {
		x.chunks, x.ctype = sseChunks(sc.ResponseBytes, sc.ChunkBytes), "text/event-stream"
	} else {
		x.chunks, x.ctype = split(jsonResponse(sc.ResponseBytes), sc.ChunkBytes), "application/json"
	}
	x.estTokens = len(x.reqBody) / 4
	return x
}

// requestBody is a chat request of about n bytes: a system prompt and a
// user turn of prose.
func requestBody(n int, stream bool) []byte {
	content := strings.Repeat("lorem ipsum dolor sit amet ", max(1, (n-200)/27))
	return []byte(`{"model":"` + benchModel + `","stream":` + strconv.FormatBool(stream) + `,"max_tokens":256,"messages":[` +
		`{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"` + content + `"}]}`)
}

func jsonResponse(n int) []byte {
	content := strings.Repeat("hello world ", max(1, (n-300)/12))
	return []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1764000000,"model":"` + benchModel +
		`","choices":[{"index":0,"message":{"role":"assistant","content":"` + content + `"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":1000,"completion_tokens":500,"total_tokens":1500}}`)
}

// sseChunks is an OpenAI chat stream with usage (include_usage), either
// one event per chunk (chunk <= 0) or cut every chunk bytes.
func sseChunks(n, chunk int) [][]byte {
	ev := `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1764000000,"model":"` + benchModel +
		`","choices":[{"index":0,"delta":{"content":"hello world "},"finish_reason":null}]}` + "\n\n"
	var events []string
	size := 0
	for size < n {
		events = append(events, ev)
		size += len(ev)
	}
	events = append(events,
		`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1764000000,"model":"`+benchModel+
			`","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n",
		`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1764000000,"model":"`+benchModel+
			`","choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":500,"total_tokens":1500}}`+"\n\n",
		"data: [DONE]\n\n")
	if chunk <= 0 {
		out := make([][]byte, len(events))
		for i, e := range events {
			out[i] = []byte(e)
		}
		return out
	}
	var b bytes.Buffer
	for _, e := range events {
		b.WriteString(e)
	}
	return split(b.Bytes(), chunk)
}

func split(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

// hv is a header as Envoy sends it: raw_value only.
func hv(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }

// messages are one worker's copies of the exchange's ProcessingRequests.
// Only the x-request-id values change between requests; gRPC marshals a
// message inside Send, so rewriting them afterwards is safe.
type messages struct {
	routerHeaders *extprocv3.ProcessingRequest
	routerBody    *extprocv3.ProcessingRequest
	upHeaders     *extprocv3.ProcessingRequest
	upBody        *extprocv3.ProcessingRequest
	upResponse    *extprocv3.ProcessingRequest
	routerResp    *extprocv3.ProcessingRequest
	chunks        []*extprocv3.ProcessingRequest
	ids           []*corev3.HeaderValue // the x-request-id values to rewrite
}

func (x *exchange) messages() *messages {
	m := &messages{}
	rid := hv(contract.HeaderRequestID, "")
	upRid := hv(contract.HeaderRequestID, "")
	m.ids = []*corev3.HeaderValue{rid, upRid}
	cl := strconv.Itoa(len(x.reqBody))
	// Downstream request headers as the router-level filter sees them
	// (HTTP/1.1 client through Envoy's HCM: pseudo-headers first).
	m.routerHeaders = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			hv(":authority", "gateway.local:8080"), hv(":path", "/v1/chat/completions"), hv(":method", "POST"), hv(":scheme", "http"),
			hv("content-type", "application/json"), hv("content-length", cl), hv("authorization", "Bearer "+VirtualKey),
			hv("user-agent", "OpenAI/Go 3.0.0"), hv("accept", "application/json"), hv("x-forwarded-proto", "http"), rid,
		}}}}}
	m.routerBody = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: x.reqBody, EndOfStream: true}}}

	// The upstream attempt's headers: the router-level mutations applied
	// (credential removed, routing headers set), Envoy's own added.
	upModel := ""
	if x.sc.RenameModel {
		upModel = renamedModel
	}
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{contract.MetadataNamespace: {Fields: map[string]*structpb.Value{
		contract.EndpointBackend: structpb.NewStringValue(benchBackend), contract.EndpointUpstreamModel: structpb.NewStringValue(upModel)}}}}
	mdText, err := prototext.Marshal(md)
	if err != nil {
		panic(err) // a fixed message always marshals
	}
	// request_attributes ride on the first message of the stream, CEL
	// values with messages printed as text format
	// (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/advanced/attributes).
	attrs := map[string]*structpb.Struct{attrNamespace: {Fields: map[string]*structpb.Value{
		contract.AttrUpstreamHostMetadata: structpb.NewStringValue(string(mdText)),
		contract.AttrAttemptCount:         structpb.NewNumberValue(1),
	}}}
	m.upHeaders = &extprocv3.ProcessingRequest{Attributes: attrs, Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			hv(":authority", "api.openai.com"), hv(":path", "/v1/chat/completions"), hv(":method", "POST"), hv(":scheme", "https"),
			hv("content-type", "application/json"), hv("content-length", cl), hv("user-agent", "OpenAI/Go 3.0.0"),
			hv("accept", "application/json"), hv("x-forwarded-proto", "http"), upRid,
			hv(contract.HeaderPool, contract.Pool{Alias: benchModel}.Cluster()),
			hv("x-envoy-expected-rq-timeout-ms", "600000"),
		}}}}}
	m.upBody = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: x.reqBody, EndOfStream: true}}}
	upstreamResp := []*corev3.HeaderValue{
		hv(":status", "200"), hv("content-type", x.ctype), hv("date", "Wed, 02 Dec 2026 15:00:00 GMT"),
		hv("openai-processing-ms", "312"), hv("x-ratelimit-limit-requests", "10000"), hv("x-ratelimit-remaining-requests", "9999"),
		hv("x-ratelimit-limit-tokens", "30000000"), hv("x-ratelimit-remaining-tokens", "29998000"),
		hv("x-ratelimit-reset-requests", "6ms"), hv("x-ratelimit-reset-tokens", "0s"), hv("x-request-id", "req_bench"),
	}
	if x.sc.Kind == "json" {
		upstreamResp = append(upstreamResp, hv("content-length", strconv.Itoa(totalLen(x.chunks))))
	}
	m.upResponse = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: upstreamResp}}}}
	// The router-level filter sees the response with the upstream
	// filter's tags added.
	routerResp := append(append([]*corev3.HeaderValue(nil), upstreamResp...),
		hv(contract.HeaderBackend, benchBackend), hv(contract.HeaderUpstreamKey, benchUpKeyID))
	m.routerResp = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: routerResp}}}}
	for i, c := range x.chunks {
		m.chunks = append(m.chunks, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: c, EndOfStream: i == len(x.chunks)-1}}})
	}
	return m
}

func totalLen(cs [][]byte) int {
	n := 0
	for _, c := range cs {
		n += len(c)
	}
	return n
}

func (m *messages) setRequestID(id []byte) {
	for _, h := range m.ids {
		h.RawValue = id
	}
}
