package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/swarmgate/swarmgate/internal/subkey"
)

// maxKeyBody bounds a key API request body: a key with every label at
// its longest is under 16 KiB.
const maxKeyBody = 64 << 10

// maxJSONDepth bounds nesting: no field of the key API is deeper than 3.
const maxJSONDepth = 8

// apiError is a refused key API request: the status and the JSON error
// {"error":{"message":...,"field":...}}.
type apiError struct {
	status int
	msg    string
	field  string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(field, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, msg: msg, field: field}
}

type apiErrorBody struct {
	Error apiErrorDetail `json:"error"`
}

type apiErrorDetail struct {
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// object is a request body's top-level members, decoded one at a time so
// that every error names its field.
type object map[string]json.RawMessage

// readObject reads a JSON object of at most maxKeyBody bytes whose members
// are all in allowed: malformed JSON, a duplicate key at any depth (two
// "team" labels would otherwise silently keep the last), an unknown member
// and an oversized body are refused before anything is decoded.
func readObject(w http.ResponseWriter, r *http.Request, allowed ...string) (object, *apiError) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxKeyBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, &apiError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body larger than %d bytes", maxKeyBody)}
	case err != nil:
		return nil, badRequest("", "reading body: "+err.Error())
	}
	if aerr := checkJSON(data); aerr != nil {
		return nil, aerr
	}
	var o object
	if err := json.Unmarshal(data, &o); err != nil || o == nil {
		return nil, badRequest("", "the body must be a JSON object")
	}
	names := make([]string, 0, len(o))
	for n := range o {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if !slices.Contains(allowed, n) {
			return nil, badRequest(n, fmt.Sprintf("unknown field %q", n))
		}
	}
	return o, nil
}

// checkJSON refuses malformed JSON, trailing data, nesting deeper than
// maxJSONDepth and duplicate object keys, naming the duplicate's path.
func checkJSON(data []byte) *apiError {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := walkJSON(dec, "", 0); err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return ae
		}
		return badRequest("", "malformed JSON: "+err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("", "malformed JSON: data after the object")
	}
	return nil
}

func walkJSON(dec *json.Decoder, path string, depth int) error {
	if depth > maxJSONDepth {
		return badRequest(path, "nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			p := joinPath(path, k)
			if seen[k] {
				return badRequest(p, fmt.Sprintf("duplicate key %q", k))
			}
			seen[k] = true
			if err := walkJSON(dec, p, depth+1); err != nil {
				return err
			}
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := walkJSON(dec, path+"["+strconv.Itoa(i)+"]", depth+1); err != nil {
				return err
			}
		}
	default:
		return nil
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

func joinPath(path, k string) string {
	if path == "" || k == "" {
		return path + k
	}
	return path + "." + k
}

// has reports whether the member is present (null included).
func (o object) has(name string) bool { _, ok := o[name]; return ok }

// null reports whether the member is present and null.
func (o object) null(name string) bool { return string(bytes.TrimSpace(o[name])) == "null" }

// decode decodes member name into v (nothing when absent), refusing
// unknown nested fields; an error names the field.
func (o object) decode(name string, v any) *apiError {
	raw, ok := o[name]
	if !ok {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fieldError(name, err)
	}
	return nil
}

func fieldError(name string, err error) *apiError {
	var te *json.UnmarshalTypeError
	var fe *subkey.FieldError
	switch {
	case errors.As(err, &fe):
		return badRequest(joinPath(name, strings.TrimPrefix(fe.Field, name)), fe.Reason)
	case errors.As(err, &te):
		return badRequest(joinPath(name, te.Field), "want "+jsonType(te.Type.String())+", got "+te.Value)
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		f, _ = strconv.Unquote(f)
		return badRequest(joinPath(name, f), fmt.Sprintf("unknown field %q", f))
	}
	return badRequest(name, err.Error())
}

// jsonType names a Go type the way a JSON client thinks of it.
func jsonType(t string) string {
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "float"):
		return "a number"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	case strings.HasPrefix(t, "map["):
		return "an object"
	}
	return t
}

// labels decodes the labels member (absent or null: nil), naming the
// label whose value is not a string.
func (o object) labels() (map[string]string, *apiError) {
	var raw map[string]json.RawMessage
	if aerr := o.decode("labels", &raw); aerr != nil || raw == nil {
		return nil, aerr
	}
	out := make(map[string]string, len(raw))
	for n, v := range raw {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, badRequest("labels."+n, "want a string")
		}
		out[n] = s
	}
	return out, nil
}

// limitsBody is limits as sent: an absent field differs from 0
// (unlimited), so a minter's key can inherit the minter's limit.
type limitsBody struct {
	RPM *int `json:"rpm"`
	RPD *int `json:"rpd"`
	TPM *int `json:"tpm"`
}

// expiry reads ttl or expires_at (at most one) into an absolute time;
// ok is false when neither is given. "expires_at": null is no expiry.
func (o object) expiry(now time.Time) (t time.Time, ok bool, aerr *apiError) {
	switch {
	case o.has("ttl") && o.has("expires_at"):
		return time.Time{}, false, badRequest("ttl", "give ttl or expires_at, not both")
	case o.null("expires_at"):
		return time.Time{}, true, nil
	case o.has("ttl"):
		d, aerr := o.ttl()
		if aerr != nil {
			return time.Time{}, false, aerr
		}
		return now.Add(d).UTC(), true, nil
	case o.has("expires_at"):
		var s string
		if aerr := o.decode("expires_at", &s); aerr != nil {
			return time.Time{}, false, aerr
		}
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return time.Time{}, false, badRequest("expires_at", fmt.Sprintf("%q is not an RFC 3339 time (2026-12-31T23:59:59Z)", s))
		}
		return t.UTC(), true, nil
	}
	return time.Time{}, false, nil
}

// maxTTL keeps now+ttl far from time.Duration's overflow.
const maxTTL = 100 * 365 * 24 * time.Hour

// ttl is a Go duration ("90m") or seconds (5400 or "5400"), positive.
func (o object) ttl() (time.Duration, *apiError) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(o["ttl"]))
	dec.UseNumber()
	_ = dec.Decode(&v) // checkJSON has parsed it already
	var d time.Duration
	switch v := v.(type) {
	case json.Number:
		secs, err := v.Float64()
		if err != nil || secs > maxTTL.Seconds() {
			return 0, badRequest("ttl", fmt.Sprintf("%s seconds is out of range", v))
		}
		// Refused before the multiplication: a huge negative one would not
		// fit a Duration.
		if !(secs > 0) {
			return 0, badRequest("ttl", "must be positive")
		}
		d = time.Duration(secs * float64(time.Second))
	case string:
		if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
			if secs > int64(maxTTL/time.Second) {
				return 0, badRequest("ttl", fmt.Sprintf("%s seconds is out of range", v))
			}
			// Refused before the multiplication: -9223372037 seconds
			// overflows it into a positive Duration.
			if secs <= 0 {
				return 0, badRequest("ttl", "must be positive")
			}
			d = time.Duration(secs) * time.Second
			break
		}
		var err error
		if d, err = time.ParseDuration(v); err != nil || d > maxTTL {
			return 0, badRequest("ttl", fmt.Sprintf("%q is not a duration (90m, 24h) or a number of seconds", v))
		}
	default:
		return 0, badRequest("ttl", "want a duration (\"24h\") or a number of seconds")
	}
	if d <= 0 {
		return 0, badRequest("ttl", "must be positive")
	}
	return d, nil
}
