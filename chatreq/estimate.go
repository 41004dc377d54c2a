package chatreq

import "math"

// DefaultBytesPerToken is the bytes-per-token ratio of English prose and code
// under OpenAI's o200k/cl100k tokenizers (measured in estimate_test.go).
const DefaultBytesPerToken = 4.0

const (
	// nonASCIIFactor scales bytesPerToken for non-ASCII text: CJK is three
	// UTF-8 bytes per character and about one token per character.
	nonASCIIFactor = 0.75
	// perMessage is the chat template overhead per message (role and
	// separators), replyPriming the tokens that prime the reply; both from
	// OpenAI's published counting recipe.
	perMessage   = 4
	replyPriming = 3
)

// EstimatePromptTokens estimates prompt tokens from byte counts alone, for
// request-time rate limiting (the real count arrives with the response).
// bytesPerToken <= 0 means DefaultBytesPerToken.
//
// Measured error with DefaultBytesPerToken against the o200k_base tokenizer
// (TestEstimateError, testdata/estimate.json): English prose -4..+5 %,
// Go/Python code -11..+10 %, JSON payloads -17..+6 %, CJK text -11..+24 %,
// tool schemas +3..+18 %. Short prompts are dominated by the fixed overhead.
func (r Request) EstimatePromptTokens(bytesPerToken float64) int {
	if !(bytesPerToken > 0) || math.IsInf(bytesPerToken, 0) {
		bytesPerToken = DefaultBytesPerToken
	}
	ascii := r.PromptBytes - r.PromptNonASCIIBytes
	t := float64(ascii)/bytesPerToken +
		float64(r.PromptNonASCIIBytes)/(bytesPerToken*nonASCIIFactor) +
		float64(r.ToolsBytes)/bytesPerToken
	t += float64(perMessage*r.Messages + r.PromptTokenIDs + replyPriming)
	if t > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(math.Ceil(t))
}
