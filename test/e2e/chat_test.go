package e2e

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/swarmgate/swarmgate/internal/contract"
	"github.com/swarmgate/swarmgate/internal/telemetry"
)

func chatParams(model string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello to the gateway.")}}
}

func TestChatJSONCountsUsage(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	c := g.client(keyTeam)
	resp, err := c.Chat.Completions.New(ctx, chatParams("gpt-4o-mini"), option.WithHeader("x-request-id", "json-1"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.CompletionTokens != 7 || resp.Usage.PromptTokens == 0 || len(resp.Choices) != 1 {
		t.Fatalf("response usage %+v", resp.Usage)
	}
	rec, ok := waitRecord(t, g.sim, "json-1")
	if !ok || rec.Cluster != (contract.Pool{Alias: "gpt-4o-mini"}).Cluster() || len(rec.Attempts) != 1 {
		t.Fatalf("sim record %+v", rec)
	}
	md := rec.DynamicMetadata[contract.MetadataNamespace]
	if md[contract.MetaCompletionTokens] != float64(7) || md[contract.MetaPromptTokens] != float64(resp.Usage.PromptTokens) {
		t.Errorf("dynamic metadata %v", md)
	}
	// What the relay received: its own key, no internal or client headers.
	h := rec.Attempts[0].Header
	if a := h.Get("authorization"); a != "Bearer relay-a-secret-1" && a != "Bearer relay-a-secret-2" {
		t.Errorf("upstream authorization %q", a)
	}
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), contract.HeaderPrefix) {
			t.Errorf("internal header %s reached the upstream", k)
		}
	}
	waitFor(t, "ledger entry", func() bool {
		r, err := g.ledger.Query(ctx, "team", month())
		return err == nil && r.Total.Requests == 1 && r.Total.OutputTokens == 7 && r.Total.InputTokens == resp.Usage.PromptTokens && r.Total.Cost > 0
	})
	if n := g.counter(t, telemetry.MetricRequests, map[string]string{"tenant": "team", "model": "gpt-4o-mini", "backend": "relay-a", "status": "200"}); n != 1 {
		t.Errorf("%s = %v", telemetry.MetricRequests, n)
	}
}

func TestChatStreamUsageChunk(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	c := g.client(keyTeam)
	for _, asked := range []bool{false, true} {
		p := chatParams("gpt-4o-mini")
		if asked {
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		s := c.Chat.Completions.NewStreaming(ctx, p)
		var text strings.Builder
		usageChunks := 0
		var total int64
		for s.Next() {
			ch := s.Current()
			if ch.Usage.TotalTokens > 0 {
				usageChunks++
				total = ch.Usage.TotalTokens
			}
			for _, choice := range ch.Choices {
				text.WriteString(choice.Delta.Content)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		want := 0
		if asked {
			want = 1
		}
		if usageChunks != want || text.Len() == 0 {
			t.Errorf("include_usage=%v: %d usage chunks (total %d), text %q", asked, usageChunks, total, text.String())
		}
	}
	// The relay was always asked for usage.
	for _, r := range g.relayA.Requests() {
		if !r.IncludeUsage {
			t.Errorf("relay request without include_usage: %+v", r)
		}
	}
	waitFor(t, "both streams in the ledger", func() bool {
		r, err := g.ledger.Query(ctx, "team", month())
		return err == nil && r.Total.Requests == 2 && r.Total.OutputTokens == 14 && r.Total.Streamed == 2
	})
}

func TestToolsRouteAsLongJob(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	p := chatParams("gpt-4o-mini")
	p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather", Parameters: shared.FunctionParameters{"type": "object"}})}
	if _, err := g.chat(keyTeam).New(ctx, p, option.WithHeader("x-request-id", "tools-1")); err != nil {
		t.Fatal(err)
	}
	if rec, _ := waitRecord(t, g.sim, "tools-1"); rec.Route != (contract.Pool{Alias: "gpt-4o-mini"}).Cluster()+"_long" {
		t.Errorf("route %q, want the long-job route", rec.Route)
	}
}

func TestSDKSeesOpenAIErrors(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	tests := []struct {
		name, key, model string
		status           int
		code             string
	}{
		{"unknown key", "sk-wrong", "gpt-4o-mini", 401, "invalid_api_key"},
		{"model not allowed", keyLimited, "gpt-4o-mini", 403, "model_not_allowed"},
		{"unknown model", keyTeam, "gpt-5-imaginary", 404, "model_not_found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := g.chat(tc.key).New(ctx, chatParams(tc.model))
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("error %v is not an *openai.Error", err)
			}
			if apiErr.StatusCode != tc.status || apiErr.Code != tc.code || apiErr.Message == "" || apiErr.Type == "" {
				t.Errorf("got %d %q %q %q", apiErr.StatusCode, apiErr.Code, apiErr.Type, apiErr.Message)
			}
		})
	}
	if n := len(g.relayA.Requests()) + len(g.relayB.Requests()); n != 0 {
		t.Errorf("%d refused requests reached a relay", n)
	}
	if n := g.refusals.Total(); n != 3 {
		t.Errorf("refusal log holds %d refusals, want 3", n)
	}
	if n := g.counter(t, telemetry.MetricRequests, map[string]string{"status": "401"}); n != 1 {
		t.Errorf("%s{status=401} = %v", telemetry.MetricRequests, n)
	}
}

func TestMalformedAndOversizedBodies(t *testing.T) {
	g := startGateway(t)
	tests := []struct {
		name, body string
		status     int
		msgHas     string
	}{
		{"malformed", "{\"model\": \"gpt-4o-mini\",\n  \"messages\": [{]}", 400, "line 2, column 17"},
		{"too large", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("a", 70000) + `"}]}`, 413, "65536"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawPost(t, g, keyTeam, tc.body)
			var e struct {
				Error struct{ Message, Type, Code string }
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if resp.StatusCode != tc.status || !strings.Contains(e.Error.Message, tc.msgHas) {
				t.Errorf("status %d body %s", resp.StatusCode, body)
			}
		})
	}
}

func TestModelsList(t *testing.T) {
	g := startGateway(t)
	page, err := g.models(keyLimited).List(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != "solo" {
		t.Errorf("models %+v", page.Data)
	}
}

func TestKeyRotationAcrossPool(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	for range 6 {
		if _, err := g.chat(keyTeam).New(ctx, chatParams("solo")); err != nil {
			t.Fatal(err)
		}
	}
	a1, a2 := g.relayA.Count("relay-a-1").OK, g.relayA.Count("relay-a-2").OK
	if a1 == 0 || a2 == 0 || a1+a2 != 6 {
		t.Errorf("keys used: relay-a-1 %d, relay-a-2 %d", a1, a2)
	}
}

// A 429 on one key is retried by Envoy (retriable-status-codes) on the same
// relay; the upstream ext_proc of the retry (another server than the
// router-level one) must pick the other key.
func TestRetryAfter429UsesAnotherKey(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	g.relayA.SetBehavior("relay-a-1", mockupstreamRateLimited())
	// Keys alternate: within two requests one first attempt lands on the
	// rate-limited key.
	for i := range 3 {
		id := "retry-" + strconv.Itoa(i)
		resp, err := g.chat(keyTeam).New(ctx, chatParams("solo"), option.WithHeader("x-request-id", id))
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if resp.Usage.CompletionTokens != 7 {
			t.Errorf("usage %+v", resp.Usage)
		}
		rec, _ := waitRecord(t, g.sim, id)
		for i := 1; i < len(rec.Attempts); i++ {
			prev, cur := rec.Attempts[i-1], rec.Attempts[i]
			if prev.Status == 429 && cur.Header.Get("authorization") == prev.Header.Get("authorization") {
				t.Errorf("%s: retry reused the rate-limited key", id)
			}
		}
		if len(rec.Attempts) > 1 {
			if rec.Attempts[0].Status != 429 || rec.Attempts[1].Status != 200 {
				t.Errorf("%s: attempts %+v", id, rec.Attempts)
			}
			break
		}
	}
	if g.relayA.Count("relay-a-1").RateLimited != 1 || g.relayA.Count("relay-a-2").OK == 0 {
		t.Errorf("relay-a counts: %+v", g.relayA.Counts())
	}
}

// With relay-a down (EDS health), the pool fails over to relay-b, whose
// model name, base path and auth style differ. The pool mixes the two: only
// the attempt on relay-b asks Envoy for the body (mode_override, with
// allow_mode_override on the upstream filter); the one on relay-a sends
// none to ext_proc.
func TestFailoverRenamesModelUpstream(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	if _, err := g.chat(keyTeam).New(ctx, chatParams("gpt-4o-mini")); err != nil {
		t.Fatal(err)
	}
	if recs := g.relayA.Requests(); len(recs) != 1 || recs[0].Model != "gpt-4o-mini" {
		t.Fatalf("relay-a saw %+v", recs)
	}
	if n := g.upstreamMessages(t, "request_body"); n != 0 {
		t.Errorf("an attempt on relay-a (no renaming) sent its body to the upstream ext_proc %v times", n)
	}
	g.sim.SetHealthy(contract.Pool{Alias: "gpt-4o-mini"}.Cluster(), g.relayA.Addr().String(), false)
	resp, err := g.chat(keyTeam).New(ctx, chatParams("gpt-4o-mini"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.CompletionTokens != 7 {
		t.Errorf("usage %+v", resp.Usage)
	}
	recs := g.relayB.Requests()
	if len(recs) != 1 || recs[0].Model != "openai/gpt-4o-mini" || recs[0].Path != "/openai/v1/chat/completions" || recs[0].KeyID != "relay-b-1" ||
		recs[0].Headers.Get("x-relay-tag") != "b" {
		t.Fatalf("relay-b saw %+v", recs)
	}
	if n := g.upstreamMessages(t, "request_body"); n != 1 {
		t.Errorf("upstream ext_proc saw %v request bodies, want the renamed attempt's one", n)
	}
	waitFor(t, "ledger row for relay-b", func() bool {
		r, err := g.ledger.Query(ctx, "team", month())
		if err != nil {
			return false
		}
		for _, row := range r.Rows {
			if row.Backend == "relay-b" && row.Key == "relay-b-1" && row.OutputTokens == 7 {
				return true
			}
		}
		return false
	})
}

func TestEmbeddingsCountUsage(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	c := g.client(keyTeam)
	resp, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "solo",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"first text to embed", "second one"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Data) != 2 || resp.Usage.PromptTokens == 0 {
		t.Fatalf("response %+v", resp.Usage)
	}
	if recs := g.relayA.Requests(); len(recs) != 1 || recs[0].Endpoint != "embeddings" {
		t.Fatalf("relay saw %+v", recs)
	}
	waitFor(t, "embeddings in the ledger", func() bool {
		r, err := g.ledger.Query(ctx, "team", month())
		return err == nil && r.Total.Requests == 1 && r.Total.InputTokens == resp.Usage.PromptTokens && r.Total.OutputTokens == 0
	})
}

// Context-window-aware routing: a request too large for relay-a's window
// goes to the restricted cluster (relay-b only); one too large for every
// target is refused in OpenAI's shape.
func TestContextWindowRouting(t *testing.T) {
	g := startGateway(t)
	ctx := testCtx(t)
	for range 4 {
		p := chatParams("ctx")
		p.MaxTokens = openai.Int(2000)
		if _, err := g.chat(keyTeam).New(ctx, p, option.WithHeader("x-request-id", "big-ctx")); err != nil {
			t.Fatal(err)
		}
		if rec, _ := waitRecord(t, g.sim, "big-ctx"); rec.Cluster != (contract.Pool{Alias: "ctx", MinContext: 100000}).Cluster() {
			t.Fatalf("cluster %q", rec.Cluster)
		}
	}
	if len(g.relayA.Requests()) != 0 || len(g.relayB.Requests()) != 4 {
		t.Errorf("relay-a %d, relay-b %d requests", len(g.relayA.Requests()), len(g.relayB.Requests()))
	}
	// Too long for every known window, but a target of unknown window
	// exists: the cluster above every known window, relay-b only.
	p := chatParams("ctx-open")
	p.MaxTokens = openai.Int(2000)
	if _, err := g.chat(keyTeam).New(ctx, p, option.WithHeader("x-request-id", "open-ctx")); err != nil {
		t.Fatal(err)
	}
	if rec, _ := waitRecord(t, g.sim, "open-ctx"); rec.Cluster != (contract.Pool{Alias: "ctx-open", MinContext: 1001}).Cluster() {
		t.Fatalf("cluster %q", rec.Cluster)
	}
	if len(g.relayA.Requests()) != 0 || len(g.relayB.Requests()) != 5 {
		t.Errorf("relay-a %d, relay-b %d requests", len(g.relayA.Requests()), len(g.relayB.Requests()))
	}
	p = chatParams("ctx")
	p.MaxTokens = openai.Int(200000)
	_, err := g.chat(keyTeam).New(ctx, p)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "context_length_exceeded" {
		t.Fatalf("error %v", err)
	}
}
