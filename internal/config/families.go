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

// translationTargets lists, per client family, the backend families a
// request can be translated into, in order of preference. extproc/translate/pairs
// holds one translator per pair (a test keeps the two in step).
var translationTargets = map[string][]string{
	FamilyAnthropicMessages: {FamilyChatCompletions},
	FamilyChatCompletions:   {FamilyAnthropicMessages},
	FamilyResponses:         {FamilyChatCompletions},
}

// TranslationTargets is the backend families a request of the client
// family can be translated into.
func TranslationTargets(client string) []string { return translationTargets[client] }

// Route is the family in which the backend takes a request of the client
// family: the client's own when the backend serves it, else the first
// translation target it serves (when translation is on); ok is false when
// the backend cannot take the request at all.
func (b *Backend) Route(client string) (family string, ok bool) {
	if b.Serves(client) {
		return client, true
	}
	if b.Translate != nil && !*b.Translate {
		return "", false
	}
	for _, f := range translationTargets[client] {
		if b.Serves(f) {
			return f, true
		}
	}
	return "", false
}
