// Package translate is what every translation between API families
// shares (docs/families.md, "Translation"): the Translator a pair is, its
// options, error bodies, hosted-tool labels and the server-sent event
// reader and writer. One package per (client family, backend family) pair
// implements one:
//
//   - messageschat:  Anthropic Messages client → chat completions backend
//   - chatmessages:  chat completions client → Anthropic Messages backend
//   - responseschat: Responses API client → chat completions backend
//
// and package pairs is the table of them the data path looks up.
//
// The request half runs per attempt in the upstream filter (a retry may
// land on a backend of another family); the response half in the
// router-level filter, which learns the answering backend from the
// attempt's response tag. Usage for the ledger is read from the backend's
// own bytes before translation, so translation never changes what is
// billed.
package translate

// Translator is one (client family, backend family) pair. Names are the
// config family names (config.Family*).
type Translator struct {
	From, To string
	// Path is the backend family's request path (before the backend's base
	// path is applied).
	Path string
	// Request rewrites a client request body of family From into one of
	// family To, naming o.Model as the model. What the backend family
	// cannot express is refused with an *Unsupported naming the field.
	Request func(body []byte, o RequestOptions) ([]byte, error)
	// NewResponse starts translating one backend answer (family To) into
	// the client's family (From).
	NewResponse func(o ResponseOptions) Response
}

// RequestOptions are the facts a request translation needs beyond the body.
type RequestOptions struct {
	// Model is the model name the backend gets (the target's upstream model).
	Model string
	// DefaultMaxTokens is the output cap to send when the client named none
	// and the backend family requires one (Anthropic's max_tokens).
	DefaultMaxTokens int
	// MaxTokensField names the output cap in a chat completions request:
	// "max_tokens" (default; what relays speak most widely) or
	// "max_completion_tokens" (what OpenAI's reasoning models require).
	MaxTokensField string
	// Hosted is what to do with tools the backend family cannot run
	// (hosted tools such as web search, file search, code execution,
	// computer use; Anthropic's server tools): refuse the request (the
	// zero value) or drop them from it.
	Hosted HostedPolicy
	// Dropped, when set, is called once per tool dropped under
	// DropHosted, with the tool's type as the client named it.
	Dropped func(toolType string)
}

// HostedPolicy is what a translation does with a tool the backend family
// cannot run (docs/translation-*.md, "Hosted tools").
type HostedPolicy uint8

const (
	// RefuseHosted refuses the request with an *Unsupported naming the
	// tool.
	RefuseHosted HostedPolicy = iota
	// DropHosted sends the request without the tool (and without a
	// tool_choice that names it), reporting each through Dropped.
	DropHosted
)

// Drop reports a dropped tool type to Dropped, if set.
func (o RequestOptions) Drop(toolType string) {
	if o.Dropped != nil {
		o.Dropped(toolType)
	}
}

// ChatMaxTokens is the chat completions field the output cap goes in.
func (o RequestOptions) ChatMaxTokens() string {
	if o.MaxTokensField == "max_completion_tokens" {
		return o.MaxTokensField
	}
	return "max_tokens"
}

// ResponseOptions are the facts a response translation needs.
type ResponseOptions struct {
	// Status is the backend's HTTP status: an answer of 400 or more is an
	// error body in the backend family's shape, translated to the client's.
	Status int
	// Stream: the backend answers in server-sent events.
	Stream bool
	// IncludeUsage: a chat completions client asked for the usage chunk
	// (stream_options.include_usage); translated streams to chat clients
	// send it only then.
	IncludeUsage bool
	// RequestID is the gateway's request id, for ids the client family
	// requires and the backend family has none of.
	RequestID string
	// Created is the answer's time (Unix seconds) for a client family that
	// states one and a backend family that does not.
	Created int64
	// Request is the client's request body, for a client family whose
	// answer echoes its request (the Responses API's tools, instructions,
	// temperature...); nil when the caller does not keep it.
	Request []byte
}

// Response translates one backend answer, chunk by chunk.
type Response interface {
	// Write translates the next chunk of the backend's body and appends
	// what the client gets to dst. end marks the body's last chunk (which
	// may be empty). A JSON answer is held until end; a stream is
	// translated event by event, holding only a partial event. An error
	// means the backend's bytes could not be read in its family; what was
	// returned before stands.
	Write(dst, chunk []byte, end bool) ([]byte, error)
	// Done reports whether the client has been sent the last event of its
	// family's stream: message_stop (Messages), response.completed,
	// response.incomplete or response.failed (Responses), data: [DONE]
	// (chat). It may come before the backend's own last event, so the
	// data path asks it, not the backend's bytes, whether a client that
	// closed the stream had the whole answer. Always false for a JSON or
	// error answer, which ends with the body.
	Done() bool
}

// Unsupported is a request the backend family cannot express: a 400 in the
// client's shape naming the field (param).
type Unsupported struct {
	Param   string
	Message string
}

func (e *Unsupported) Error() string { return e.Message }
