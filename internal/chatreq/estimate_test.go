package chatreq

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// testdata/estimate/*.json are chat requests of one kind of text each;
// tokens.json holds their exact token counts under OpenAI's tokenizers,
// computed once by testdata/estimate/count.js with the gpt-tokenizer npm
// package's o200k_base and cl100k_base (messages by OpenAI's counting
// recipe: 3 per message + role + content + tool-call name/arguments, 3 to
// prime the reply; tools as their JSON).
type tokenCounts struct {
	Prompt int `json:"prompt"`
	Tools  int `json:"tools"`
}

func TestEstimateError(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "estimate", "tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	var truth map[string]map[string]tokenCounts
	if err := json.Unmarshal(raw, &truth); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(truth))
	for n := range truth {
		names = append(names, n)
	}
	sort.Strings(names)
	const bound = 0.25 // o200k_base: current models
	for _, n := range names {
		body, err := os.ReadFile(filepath.Join("testdata", "estimate", n))
		if err != nil {
			t.Fatal(err)
		}
		r, err := Scan(body)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		est := r.EstimatePromptTokens(0)
		for _, enc := range []string{"o200k_base", "cl100k_base"} {
			want := truth[n][enc].Prompt + truth[n][enc].Tools
			e := float64(est-want) / float64(want)
			t.Logf("%-18s %-11s bytes=%5d nonascii=%4d tools=%4d estimate=%5d tokens=%5d error=%+6.1f%%",
				n, enc, r.PromptBytes, r.PromptNonASCIIBytes, r.ToolsBytes, est, want, 100*e)
			// cl100k is older and much worse on CJK; hold only o200k (current
			// models) to the bound and cl100k to a looser one.
			b := bound
			if enc == "cl100k_base" {
				b = 0.30
			}
			if math.Abs(e) > b {
				t.Errorf("%s/%s: estimate %d vs %d tokens: error %+.1f%% beyond %.0f%%", n, enc, est, want, 100*e, 100*b)
			}
		}
	}
}

func TestEstimateEdges(t *testing.T) {
	r := Request{PromptBytes: 550, Messages: 1}
	if got := r.EstimatePromptTokens(4); got != 100+4+3 {
		t.Errorf("550 word bytes, 1 message = %d", got)
	}
	if got := (Request{PromptBytes: 160, PromptSymbolBytes: 160}).EstimatePromptTokens(8); got != 50+3 {
		t.Errorf("160 symbol bytes at 8 bytes/token = %d, want 53", got)
	}
	if got := (Request{PromptBytes: 360, PromptNonASCIIBytes: 360}).EstimatePromptTokens(0); got != 100+3 {
		t.Errorf("360 non-ASCII bytes = %d, want 103", got)
	}
	for _, bpt := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if got := r.EstimatePromptTokens(bpt); got != 107 {
			t.Errorf("bytesPerToken %v: %d, want the default's 107", bpt, got)
		}
	}
	if got := (Request{PromptTokenIDs: 10}).EstimatePromptTokens(4); got != 13 {
		t.Errorf("token ids: %d", got)
	}
	if got := (Request{PromptBytes: math.MaxInt32}).EstimatePromptTokens(1e-300); got != math.MaxInt32 {
		t.Errorf("overflow: %d", got)
	}
}
