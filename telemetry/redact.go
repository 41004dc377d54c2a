package telemetry

import (
	"regexp"
	"strings"
)

// Redacted replaces every secret the redactor finds.
const Redacted = "[REDACTED]"

var (
	// JSON members whose value is a credential, whatever the value looks
	// like: "authorization", "api_key", "x-api-key", "password", "token"...
	secretMember = regexp.MustCompile(`(?i)("(?:authorization|proxy-authorization|x-api-key|api[-_]?key|x-goog-api-key|password|passwd|secret|client[-_]secret|access[-_]token|refresh[-_]token|id[-_]token|token|cookie|set-cookie)"\s*:\s*)"(?:[^"\\]|\\.)*"`)
	// Header lines and query parameters with a credential.
	secretHeader = regexp.MustCompile(`(?i)\b((?:proxy-)?authorization|x-api-key|api-key|x-goog-api-key|cookie)(\s*[:=]\s*)[^\r\n"&,]+`)
	secretQuery  = regexp.MustCompile(`(?i)([?&](?:api[-_]?key|key|token|access_token|password)=)[^&\s"]+`)
	// Credentials recognisable by shape anywhere in the text.
	bearerToken = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{4,}`)
	secretShape = regexp.MustCompile(`\b(?:sk-[A-Za-z0-9_\-]{6,}|AIza[0-9A-Za-z_\-]{30,}|xox[abposr]-[A-Za-z0-9\-]{10,}|gh[pousr]_[A-Za-z0-9]{20,}|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,})`)
)

// RedactBody returns body with credentials replaced by Redacted: JSON members
// named like a credential (authorization, api_key, password, token...),
// header and query-parameter credentials, bearer/basic tokens, and anything
// shaped like a provider key (sk-..., AIza..., GitHub and Slack tokens,
// JWTs). It is for debug logging only: it is not a parser and is tuned to
// over-redact rather than leak. The input is not modified.
func RedactBody(body []byte) string {
	s := string(body)
	s = secretMember.ReplaceAllString(s, `${1}"`+Redacted+`"`)
	s = secretHeader.ReplaceAllString(s, `${1}${2}`+Redacted)
	s = secretQuery.ReplaceAllString(s, `${1}`+Redacted)
	s = bearerToken.ReplaceAllString(s, `${1} `+Redacted)
	s = secretShape.ReplaceAllString(s, Redacted)
	return s
}

// sensitiveHeader reports whether a header carries a credential.
func sensitiveHeader(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie", "set-cookie":
		return true
	}
	return strings.Contains(n, "token") || strings.Contains(n, "secret") || strings.Contains(n, "password")
}

// RedactHeaders returns a copy of headers with credential headers replaced
// by Redacted and the other values passed through RedactBody.
func RedactHeaders(headers map[string]string) map[string]string {
	out := make(map[string]string, len(headers))
	for k, v := range headers {
		if sensitiveHeader(k) {
			out[k] = Redacted
			continue
		}
		out[k] = RedactBody([]byte(v))
	}
	return out
}
