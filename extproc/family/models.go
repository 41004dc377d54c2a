package family

import (
	"net/http"

	"github.com/swarmgate/swarmgate/internal/jsonstr"
)

const modelsPath = "/v1/models"

// Models is GET /v1/models and /v1/models/{id}, answered by the gateway
// with the aliases the caller may use, in OpenAI's list shape or, when the
// caller sends anthropic-version, in Anthropic's.
var Models = &Spec{Path: modelsPath, Method: http.MethodGet, Errors: OpenAI, Local: true}

func init() { register(Models) }

// AppendModel appends one model object in the shape.
func (sh ErrorShape) AppendModel(b []byte, id string) []byte {
	if sh == Anthropic {
		b = append(b, `{"type":"model","id":`...)
		b = jsonstr.Append(b, id)
		b = append(b, `,"display_name":`...)
		b = jsonstr.Append(b, id)
		return append(b, `,"created_at":"1970-01-01T00:00:00Z"}`...)
	}
	b = append(b, `{"id":`...)
	b = jsonstr.Append(b, id)
	return append(b, `,"object":"model","created":0,"owned_by":"swarmgate"}`...)
}

// AppendList wraps model objects (already joined by commas) in the list.
func (sh ErrorShape) AppendList(b []byte, items []byte, first, last string) []byte {
	if sh == Anthropic {
		b = append(b, `{"data":[`...)
		b = append(b, items...)
		b = append(b, `],"has_more":false,"first_id":`...)
		b = nullable(b, first)
		b = append(b, `,"last_id":`...)
		b = nullable(b, last)
		return append(b, '}')
	}
	b = append(b, `{"object":"list","data":[`...)
	b = append(b, items...)
	return append(b, "]}"...)
}

func nullable(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return jsonstr.Append(b, s)
}
