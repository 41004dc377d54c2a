// Package mockupstream is a fake OpenAI-compatible and Anthropic-compatible
// provider for end-to-end, fault and swarm tests and for
// `swarmgate mock-upstream`.
//
// Endpoints, matched on the path suffix so relay prefixes such as
// /openai/v1 work: POST …/chat/completions (JSON, or SSE with
// "stream": true), POST …/completions, POST …/embeddings, GET …/models;
// the Responses API, POST …/responses (responses.go), and Anthropic's
// Messages API, POST …/messages and …/messages/count_tokens (messages.go),
// each in its provider's published shapes (the objects of
// internal/schema/openai and internal/schema/anthropic, which the
// gateway's translators share), JSON and named-event SSE, with its own
// error shape and rate-limit headers; testdata/answers.golden pins the
// bytes.
//
// Credentials are read as Options.Auth says (Authorization: Bearer,
// x-api-key or api-key) and must be one of Options.Keys (any non-empty one
// when no keys are configured); otherwise the answer is a 401 OpenAI error
// (type invalid_request_error, code invalid_api_key). Every answer to an
// authenticated request carries x-mock-key-id: the id of the key used.
//
// Streams are framed exactly like OpenAI's: "data: <json>\n\n" chunks with
// choices[].delta (a role chunk, content chunks of Options.TokensPerChunk
// tokens, a chunk with finish_reason), then, when
// stream_options.include_usage is true, a chunk with "choices":[] and usage
// (earlier chunks then carry "usage":null), then "data: [DONE]\n\n".
//
// Usage is deterministic:
//   - prompt_tokens = ceil(B / Options.BytesPerToken (default 4)), at least
//     1, where B is the UTF-8 byte count of the text inputs (message
//     contents, text parts, prompt, input; each token id of a token array
//     counts as one token);
//   - completion_tokens = the x-mock-completion-tokens request header, else
//     min(Options.CompletionTokens (default 16), max_completion_tokens or
//     max_tokens when set); finish_reason is "length" when max_tokens cut
//     it;
//   - usage.prompt_tokens_details.cached_tokens and
//     usage.completion_tokens_details.reasoning_tokens appear when positive
//     (Options.CachedTokens / ReasoningTokens, or the x-mock-cached-tokens /
//     x-mock-reasoning-tokens headers); reasoning tokens are part of
//     completion_tokens and are not streamed as content.
//
// Tool calls are opt-in (Options.ToolCalls, --tool-calls; tools.go): a
// chat completions or Anthropic Messages request that declares tools and
// does not end in a tool result is answered with two parallel calls of the
// first declared tool, arguments {"city":"Paris"} and {"city":"Rome"}
// (ToolCallArguments), ids call_<n>_0/1 or toolu_<n>_0/1, finish_reason
// tool_calls (content null) or stop_reason tool_use (after a text block,
// ToolCallText), JSON or streamed as the providers stream them (arguments
// in pieces: deltas of tool_calls[].function.arguments, input_json_delta).
// Usage is a text answer's. A request ending in a tool result is answered
// with text. Records count the tool calls answered (ToolCalls), the tool
// results the request carried (ToolResults) and whether it carried an
// image part (SawImage), whatever ToolCalls is.
//
// Scripted tool calls (Options.ToolScript, agent.go) let a real agent
// finish a task against the mock: a request declaring a scripted tool is
// answered with one call of it with the scripted arguments (chat, Anthropic
// Messages and Responses, JSON and SSE; a Responses namespace's function
// with its namespace), and the request carrying the tool's result with
// text. `swarmgate mock-upstream --tool-script 'Bash={"command":"ls"}'`
// does the same from the command line (repeatable).
//
// Per-key behaviour (Server.SetBehavior, goroutine-safe, from the next
// request): OK, 429 with Retry-After, an error status, a reset before the
// answer, a reset after N stream chunks, fixed-window RPM/TPM limits with
// x-ratelimit-* headers, random failures with a seeded RNG, extra latency
// and extra headers. Requests() and Counts() expose what was received; no
// record or log line ever holds a credential value (KeyHash is a short
// SHA-256 prefix).
package mockupstream
