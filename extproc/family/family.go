// Package family is what the data path knows about each API family a client
// may speak (chat completions, completions, embeddings, the Responses API,
// Anthropic Messages and count_tokens, the model list): one Spec per
// endpoint, one file each. Admission, keys and accounting stay in extproc
// and never switch on the family; they ask its Spec.
//
// Request bodies of every family are read by chatreq's one-pass scanner and
// usage by accounting/usage's stream parser, which know every family's
// field names: passthrough allocates nothing per family. Adding a family is
// adding a file here with its Spec in the registry (and its usage fields to
// accounting/usage if they are new).
package family

import "github.com/swarmgate/swarmgate/internal/chatreq"

// Spec is one endpoint's family.
type Spec struct {
	// Name is the config family name backends declare (config.Family*);
	// "" for an endpoint answered by the gateway itself.
	Name   string
	Path   string
	Method string
	// Errors is the shape of the refusals the gateway writes on this path.
	Errors ErrorShape
	// Billed: a completion the ledger, budgets and TPM charge. count_tokens
	// is admitted and routed but costs nothing.
	Billed bool
	// InjectUsage: streams need stream_options.include_usage to report
	// usage (OpenAI chat and completions); the gateway adds it and removes
	// the usage-only event the client did not ask for.
	InjectUsage bool
	// NoOutput: the family produces no output tokens (embeddings), so no
	// output reservation is made.
	NoOutput bool
	// Validate refuses what the family requires or the gateway cannot keep
	// its promises for; nil accepts every scanned request.
	Validate func(r chatreq.Request) *Refusal // by value: a pointer would move the scan result to the heap
	// EchoesRequest: the family's answer repeats request fields (the
	// Responses API's tools, instructions, temperature...), so a
	// translated answer needs the client's body.
	EchoesRequest bool
	// Untranslated: only backends that speak the family natively take the
	// request (count_tokens: no other family has an equivalent).
	Untranslated bool
	// Local answers the request in the gateway (the model list).
	Local bool
	// Provider and Operation name the request in its GenAI span
	// (gen_ai.provider.name / gen_ai.system and gen_ai.operation.name):
	// the API the client speaks, whichever backend serves it.
	Provider, Operation string
}

// Refusal is a request the family's rules refuse (400), naming the field.
type Refusal struct {
	Message string
	Param   string
	Code    string
}

var byPath = map[string]*Spec{}

// register adds a Spec; called from each family file's init.
func register(s *Spec) {
	if _, dup := byPath[s.Path]; dup {
		panic("family: two specs for " + s.Path)
	}
	byPath[s.Path] = s
}

// ForPath is the Spec serving a request path (query removed), nil when none.
// /v1/models/{id} is served by the model list's Spec.
func ForPath(path string) *Spec {
	if s := byPath[path]; s != nil {
		return s
	}
	if len(path) > len(modelsPath)+1 && path[:len(modelsPath)+1] == modelsPath+"/" {
		return byPath[modelsPath]
	}
	return nil
}

// ShapeForPath is the error shape of a path, for refusals made before a
// Spec is known (or for an unknown path): Anthropic's under /v1/messages.
func ShapeForPath(path string) ErrorShape {
	if s := ForPath(path); s != nil {
		return s.Errors
	}
	if len(path) >= len(messagesPath) && path[:len(messagesPath)] == messagesPath {
		return Anthropic
	}
	return OpenAI
}
