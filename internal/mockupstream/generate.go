package mockupstream

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/swarmgate/swarmgate/internal/schema/openai"
)

// usage is the deterministic token accounting of one request.
type usage struct {
	prompt, completion, cached, reasoning int
	// cacheWrite are prompt tokens written to the cache (Anthropic's
	// cache_creation_input_tokens); cached + cacheWrite <= prompt.
	cacheWrite int
	finish     string // stop or length
}

// usageFor computes usage. Formula (documented in Options):
//   - prompt_tokens = ceil(B / BytesPerToken), at least 1, where B is the
//     number of UTF-8 bytes of the text inputs: every message content
//     (string or text parts), prompt, input; a token id in a token-array
//     prompt/input counts as one token.
//   - completion_tokens = header x-mock-completion-tokens if present, else
//     min(CompletionTokens, max_completion_tokens|max_tokens when > 0);
//     finish_reason is "length" when max_tokens cut it short.
//   - reasoning tokens are part of completion_tokens; the visible content
//     has completion_tokens - reasoning_tokens tokens.
func (s *Server) usageFor(endpoint string, q *apiRequest, h http.Header) usage {
	bpt := s.opts.BytesPerToken
	var n int
	for _, m := range q.Messages {
		n += textBytes(m.Content, bpt)
	}
	n += textBytes(q.Prompt, bpt) + textBytes(q.Input, bpt) + textBytes(q.System, bpt) + textBytes(q.Instructions, bpt)
	u := usage{prompt: max(1, (n+bpt-1)/bpt), finish: "stop"}
	if endpoint == "embeddings" || endpoint == "count_tokens" {
		return u
	}
	u.completion = s.opts.CompletionTokens
	if v, ok := headerInt(h, "X-Mock-Completion-Tokens"); ok {
		u.completion = v
	} else if mt := q.maxTokens(); mt > 0 && mt < u.completion {
		u.completion, u.finish = mt, "length"
	}
	u.cached = s.opts.CachedTokens
	if v, ok := headerInt(h, "X-Mock-Cached-Tokens"); ok {
		u.cached = v
	}
	u.reasoning = s.opts.ReasoningTokens
	if v, ok := headerInt(h, "X-Mock-Reasoning-Tokens"); ok {
		u.reasoning = v
	}
	u.cached = min(u.cached, u.prompt)
	u.reasoning = min(u.reasoning, u.completion)
	if endpoint == "messages" {
		// Anthropic reports no reasoning apart (thinking is output);
		// cache writes are its own.
		u.reasoning = 0
		u.cacheWrite = s.opts.CacheWriteTokens
		if v, ok := headerInt(h, "X-Mock-Cache-Write-Tokens"); ok {
			u.cacheWrite = v
		}
		u.cacheWrite = min(u.cacheWrite, u.prompt-u.cached)
	}
	return u
}

func headerInt(h http.Header, name string) (int, bool) {
	v := h.Get(name)
	if v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// textBytes counts the text bytes of a content/prompt/input value.
func textBytes(raw json.RawMessage, bpt int) int {
	if len(raw) == 0 {
		return 0
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0
	}
	var walk func(any) int
	walk = func(v any) int {
		switch t := v.(type) {
		case string:
			return len(t)
		case float64:
			return bpt // a token id
		case []any:
			n := 0
			for _, e := range t {
				n += walk(e)
			}
			return n
		case map[string]any:
			if s, ok := t["text"].(string); ok {
				return len(s)
			}
			// Anthropic tool_result and Responses message items nest
			// their text under content.
			if c, ok := t["content"]; ok {
				return walk(c)
			}
		}
		return 0
	}
	return walk(v)
}

var words = []string{"Mock", " reply", " from", " the", " fake", " upstream", ",", " token", " by", " token", "."}

// tokenText is the visible text of tokens [from, to).
func tokenText(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		b.WriteString(words[i%len(words)])
	}
	return b.String()
}

func (u usage) json() *openai.Usage {
	j := &openai.Usage{PromptTokens: int64(u.prompt), CompletionTokens: int64(u.completion), TotalTokens: int64(u.prompt + u.completion)}
	if u.cached > 0 {
		j.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: int64(u.cached)}
	}
	if u.reasoning > 0 {
		j.CompletionTokensDetails = &openai.CompletionTokensDetails{ReasoningTokens: int64(u.reasoning)}
	}
	return j
}

// answer writes a successful answer; resetAfter >= 0 resets the connection
// after that many SSE chunks (or half the JSON body).
func (s *Server) answer(w http.ResponseWriter, r *http.Request, rec *Record, q *apiRequest, u usage, resetAfter int) {
	id := s.nextID()
	created := s.opts.Now().Unix()
	tool, args := s.toolToCall(rec.Endpoint, q)
	switch {
	case rec.Endpoint == "count_tokens":
		s.writeJSON(w, rec, map[string]int{"input_tokens": u.prompt}, resetAfter >= 0)
	case tool.name != "" && rec.Endpoint == "chat":
		s.answerToolCalls(w, r, rec, q, u, tool.name, args, id, created, resetAfter)
	case tool.name != "" && rec.Endpoint == "messages":
		s.answerToolUse(w, r, rec, q, u, tool.name, args, id, resetAfter)
	case tool.name != "" && rec.Endpoint == "responses":
		s.answerResponsesCall(w, r, rec, q, u, tool, args[0], id, created, resetAfter)
	case rec.Endpoint == "messages":
		s.answerMessages(w, r, rec, q, u, id, resetAfter)
	case rec.Endpoint == "responses":
		s.answerResponses(w, r, rec, q, u, id, created, resetAfter)
	case rec.Endpoint == "embeddings":
		s.writeJSON(w, rec, s.embeddings(q, u), resetAfter >= 0)
	case q.Stream:
		s.stream(w, r, rec, q, u, id, created, resetAfter)
	default:
		// A JSON answer takes as long as the stream would have.
		chunks := (u.completion - u.reasoning + s.opts.TokensPerChunk - 1) / s.opts.TokensPerChunk
		if !sleep(r.Context(), s.opts.TTFT+s.opts.InterTokenDelay*time.Duration(max(0, chunks-1))) {
			s.update(func() { rec.Outcome = "canceled" })
			return
		}
		text := tokenText(0, u.completion-u.reasoning)
		var body any
		if rec.Endpoint == "chat" {
			body = openai.ChatCompletion{
				ID: fmt.Sprintf("chatcmpl-mock-%d", id), Object: "chat.completion", Created: created, Model: q.Model,
				SystemFingerprint: "fp_mock",
				Choices: []openai.ChatChoice{{Message: &openai.ChatDelta{Role: "assistant", Content: &text},
					FinishReason: &u.finish}},
				Usage: u.json(),
			}
		} else {
			body = openai.TextCompletion{
				ID: fmt.Sprintf("cmpl-mock-%d", id), Object: "text_completion", Created: created, Model: q.Model,
				SystemFingerprint: "fp_mock",
				Choices:           []openai.TextChoice{{Text: text, FinishReason: &u.finish}},
				Usage:             u.json(),
			}
		}
		s.writeJSON(w, rec, body, resetAfter >= 0)
	}
}

func (s *Server) writeJSON(w http.ResponseWriter, rec *Record, body any, cut bool) {
	b, err := json.Marshal(body)
	if err != nil {
		s.fail(w, rec, http.StatusInternalServerError, "error", "server_error", "", "mock: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	if cut {
		s.update(func() { rec.Status, rec.Outcome = http.StatusOK, "reset_mid_stream" })
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b[:len(b)/2])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		abort(w)
		return
	}
	s.update(func() { rec.Status, rec.Outcome = http.StatusOK, "ok" })
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// nullUsage marshals as JSON null (OpenAI sends "usage":null on every
// chunk but the last when include_usage is set).
type nullUsage struct{}

func (nullUsage) MarshalJSON() ([]byte, error) { return []byte("null"), nil }

// stream writes an SSE answer exactly like OpenAI: "data: {json}\n\n" per
// chunk, a role chunk first, content chunks, a chunk with finish_reason,
// then with include_usage a chunk with "choices":[] and usage, then
// "data: [DONE]".
func (s *Server) stream(w http.ResponseWriter, r *http.Request, rec *Record, q *apiRequest, u usage, id uint64, created int64, resetAfter int) {
	chat := rec.Endpoint == "chat"
	var perChunk any
	if q.includeUsage() {
		perChunk = nullUsage{}
	}
	chunk := func(content *string, role string, finish *string, usage any, empty bool) any {
		if chat {
			c := openai.ChatCompletion{ID: fmt.Sprintf("chatcmpl-mock-%d", id), Object: "chat.completion.chunk", Created: created,
				Model: q.Model, SystemFingerprint: "fp_mock", Usage: usage, Choices: []openai.ChatChoice{}}
			if !empty {
				c.Choices = []openai.ChatChoice{{Delta: &openai.ChatDelta{Role: role, Content: content}, FinishReason: finish}}
			}
			return c
		}
		c := openai.TextCompletion{ID: fmt.Sprintf("cmpl-mock-%d", id), Object: "text_completion", Created: created,
			Model: q.Model, SystemFingerprint: "fp_mock", Usage: usage, Choices: []openai.TextChoice{}}
		if !empty {
			text := ""
			if content != nil {
				text = *content
			}
			c.Choices = []openai.TextChoice{{Text: text, FinishReason: finish}}
		}
		return c
	}

	var events []any
	if chat {
		empty := ""
		events = append(events, chunk(&empty, "assistant", nil, perChunk, false))
	}
	visible, k := u.completion-u.reasoning, s.opts.TokensPerChunk
	for from := 0; from < visible; from += k {
		text := tokenText(from, min(from+k, visible))
		events = append(events, chunk(&text, "", nil, perChunk, false))
	}
	if chat {
		events = append(events, chunk(nil, "", &u.finish, perChunk, false))
	} else {
		empty := ""
		events = append(events, chunk(&empty, "", &u.finish, perChunk, false))
	}
	if q.includeUsage() {
		events = append(events, chunk(nil, "", nil, u.json(), true))
	}

	evs := make([]sseEvent, len(events))
	for i, ev := range events {
		evs[i] = sseEvent{data: ev}
	}
	s.writeEvents(w, r, rec, evs, resetAfter, "data: [DONE]\n\n")
}

type embeddingList struct {
	Object string      `json:"object"`
	Data   []embedding `json:"data"`
	Model  string      `json:"model"`
	Usage  struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

type embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

// embeddings returns one deterministic unit vector per input.
func (s *Server) embeddings(q *apiRequest, u usage) embeddingList {
	var inputs []json.RawMessage
	if err := json.Unmarshal(q.Input, &inputs); err != nil || (len(inputs) > 0 && inputs[0][0] != '"' && inputs[0][0] != '[') {
		inputs = []json.RawMessage{q.Input} // one string, or one token array
	}
	dims := s.opts.EmbeddingDims
	if q.Dimensions > 0 && q.Dimensions <= 4096 {
		dims = q.Dimensions
	}
	out := embeddingList{Object: "list", Model: q.Model, Data: make([]embedding, len(inputs))}
	for i, in := range inputs {
		vec := vectorFor(in, dims)
		var e any = vec
		if q.EncodingFormat == "base64" {
			buf := make([]byte, 4*len(vec))
			for j, f := range vec {
				binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(f))
			}
			e = base64.StdEncoding.EncodeToString(buf)
		}
		out.Data[i] = embedding{Object: "embedding", Index: i, Embedding: e}
	}
	out.Usage.PromptTokens, out.Usage.TotalTokens = u.prompt, u.prompt
	return out
}

func vectorFor(in []byte, dims int) []float32 {
	h := fnv.New64a()
	_, _ = h.Write(in)
	seed := h.Sum64()
	vec := make([]float32, dims)
	var norm float64
	for i := range vec {
		seed = seed*6364136223846793005 + 1442695040888963407
		f := float64(int64(seed>>11))/float64(1<<52) - 1
		vec[i] = float32(f)
		norm += f * f
	}
	if norm > 0 {
		inv := 1 / math.Sqrt(norm)
		for i := range vec {
			vec[i] = float32(float64(vec[i]) * inv)
		}
	}
	return vec
}

type modelList struct {
	Object string        `json:"object"`
	Data   []modelObject `json:"data"`
}

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (s *Server) serveModels(w http.ResponseWriter, rec *Record) {
	l := modelList{Object: "list", Data: make([]modelObject, len(s.opts.Models))}
	for i, m := range s.opts.Models {
		l.Data[i] = modelObject{ID: m, Object: "model", Created: 1700000000, OwnedBy: "mockupstream"}
	}
	s.writeJSON(w, rec, l, false)
}
