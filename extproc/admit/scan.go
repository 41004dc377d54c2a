package admit

import (
	"context"
	"errors"
	"net/http"

	"github.com/swarmgate/swarmgate/extproc/family"
	"github.com/swarmgate/swarmgate/internal/chatreq"
	"github.com/swarmgate/swarmgate/internal/config"
)

// Scan is the body step: one pass over the body (no unmarshal), then the
// model, the tenant's right to it, the family's rules and the Responses
// API's previous_response_id; it sizes the request (prompt estimate at
// request.bytes_per_token, output reserve). The body must already be
// within request.max_body_bytes.
func (a *Admitter) Scan(ctx context.Context, cfg *config.Config, f *Facts, body []byte) (chatreq.Request, *Refusal) {
	if f.Owner.Tenant == nil {
		// Headers were refused or never seen; Envoy should not send a body.
		return chatreq.Request{}, InvalidKey("You didn't provide an API key.")
	}
	cr, err := chatreq.Scan(body)
	if err != nil {
		return cr, scanError(err)
	}
	f.Alias = cr.Model
	model, ok := cfg.Model(f.Alias)
	if !ok {
		return cr, ModelNotFound(f.Alias)
	}
	if !f.Owner.Tenant.Allows(f.Alias) {
		return cr, &Refusal{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "model_not_allowed", Param: "model",
			Message: "Your API key may not use the model `" + f.Alias + "`."}
	}
	if f.Spec.Validate != nil {
		if v := f.Spec.Validate(cr); v != nil {
			return cr, BadRequest(v.Message, v.Code, v.Param)
		}
	}
	if cr.StoredRef != "" {
		return cr, StoredObject(cr.StoredRef)
	}
	if f.Spec == family.Responses && cr.PreviousResponse != "" {
		o, r := a.previousOwner(ctx, cfg, f, cr.PreviousResponse, model)
		if r != nil {
			return cr, r
		}
		f.Pinned = o
	}
	size(cfg, f, model, cr)
	return cr, nil
}

// StoredObject: the request refers to an object stored with the provider
// (a file, vector store, container, conversation, stored prompt or item).
// Every tenant's requests go out on the same provider accounts, so such an
// id would read whatever the account holds under it, another tenant's or
// another application's; the gateway serves none of the APIs that create
// them. (previous_response_id, whose owner the gateway records, is
// checked instead: previousOwner.)
func StoredObject(param string) *Refusal {
	return BadRequest("`"+param+"` refers to an object stored with the provider; this gateway serves many tenants on shared provider "+
		"accounts and does not pass on references to stored files, vector stores, containers, conversations, prompts or items: "+
		"send the content itself.", "unsupported_parameter", param)
}

// size fills the request's model and its token figures.
func size(cfg *config.Config, f *Facts, model *config.Model, cr chatreq.Request) {
	f.Model = model
	f.Stream = cr.Stream
	f.ClientUsage = cr.IncludeUsage
	f.HasTools = cr.HasTools
	f.MaxTokens = cr.MaxTokens
	f.EstTokens = cr.EstimatePromptTokens(cfg.Request.BytesPerToken)
	f.MaxOut = cr.MaxTokens
	switch {
	case f.Spec.NoOutput:
		f.MaxOut = 0
	case f.MaxOut == 0:
		f.MaxOut = cfg.Request.DefaultMaxOutputTokens
	}
}

func scanError(err error) *Refusal {
	var se *chatreq.SyntaxError
	var fe *chatreq.FieldError
	switch {
	case errors.As(err, &se):
		return BadRequest("We could not parse the JSON body of your request: "+se.Error()+".", "invalid_json", "")
	case errors.As(err, &fe):
		return BadRequest(fe.Error()+".", "invalid_value", fe.Field)
	case errors.Is(err, chatreq.ErrNoModel), errors.Is(err, chatreq.ErrModelType), errors.Is(err, chatreq.ErrDuplicateModel):
		return BadRequest(err.Error()+".", "invalid_value", "model")
	}
	return BadRequest(err.Error()+".", "invalid_json", "")
}
