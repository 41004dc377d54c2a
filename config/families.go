package config

import "slices"

// API family names a backend may serve (Backend.Families). The data path's
// knowledge of each family lives in extproc/family; config only names them.
const (
	FamilyChatCompletions   = "chat_completions"   // POST /v1/chat/completions
	FamilyCompletions       = "completions"        // POST /v1/completions
	FamilyEmbeddings        = "embeddings"         // POST /v1/embeddings
	FamilyResponses         = "responses"          // POST /v1/responses (OpenAI Responses API)
	FamilyAnthropicMessages = "anthropic_messages" // POST /v1/messages and /v1/messages/count_tokens
)

// FamilyNames lists every family a backend may declare.
var FamilyNames = []string{FamilyChatCompletions, FamilyCompletions, FamilyEmbeddings, FamilyResponses, FamilyAnthropicMessages}

// DefaultFamilies is what a backend of the api_style serves when its config
// names no families: what swarmgate forwarded to it before families existed
// (openai), or the Messages API (anthropic).
func DefaultFamilies(apiStyle string) []string {
	if apiStyle == "anthropic" {
		return []string{FamilyAnthropicMessages}
	}
	return []string{FamilyChatCompletions, FamilyCompletions, FamilyEmbeddings}
}

// Serves reports whether the backend serves the API family.
func (b *Backend) Serves(family string) bool { return slices.Contains(b.Families, family) }

// Anthropic reports whether the backend speaks Anthropic's API conventions
// (anthropic-version header on every request).
func (b *Backend) Anthropic() bool { return b.APIStyle == "anthropic" }
