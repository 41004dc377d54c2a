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
	bearerToken  = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{4,}`)
	// Credentials recognisable by shape anywhere in the text. One regexp
	// each, so each starts with a literal and the scan skips ahead to it.
	secretShapes = []*regexp.Regexp{
		regexp.MustCompile(`sk-[A-Za-z0-9_\-]{6,}`),
		regexp.MustCompile(`AIza[0-9A-Za-z_\-]{30,}`),
		regexp.MustCompile(`xox[abposr]-[A-Za-z0-9\-]{10,}`),
		regexp.MustCompile(`gh[pousr]_[A-Za-z0-9]{20,}`),
		regexp.MustCompile(`eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}`),
	}
)

// Cheap gates: a pattern only runs when the lower-cased text holds one of
// its words, so an ordinary prompt costs a few substring searches.
var (
	memberWords = []string{`authorization"`, `key"`, `password"`, `passwd"`, `secret"`, `token"`, `cookie"`}
	headerWords = []string{"authorization", "api-key", "cookie"}
	queryWords  = []string{"key=", "token=", "password="}
	bearerWords = []string{"bearer", "basic"}
)

func containsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// redactShapes replaces provider-key shapes that start at a word boundary.
func redactShapes(s string) string {
	for _, re := range secretShapes {
		matches := re.FindAllStringIndex(s, -1)
		if matches == nil {
			continue
		}
		var b strings.Builder
		b.Grow(len(s))
		last := 0
		for _, m := range matches {
			if m[0] > 0 && isWordByte(s[m[0]-1]) {
				continue // "task-force": not a key
			}
			b.WriteString(s[last:m[0]])
			b.WriteString(Redacted)
			last = m[1]
		}
		b.WriteString(s[last:])
		s = b.String()
	}
	return s
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// RedactBody returns body with credentials replaced by Redacted: JSON members
// named like a credential (authorization, api_key, password, token...),
// header and query-parameter credentials, bearer/basic tokens, and anything
// shaped like a provider key (sk-..., AIza..., GitHub and Slack tokens,
// JWTs). It is for debug logging only: it is not a parser and is tuned to
// over-redact rather than leak. The input is not modified.
func RedactBody(body []byte) string {
	s := string(body)
	lower := strings.ToLower(s)
	if containsAny(lower, memberWords) {
		s = secretMember.ReplaceAllString(s, `${1}"`+Redacted+`"`)
	}
	if containsAny(lower, headerWords) {
		s = secretHeader.ReplaceAllString(s, `${1}${2}`+Redacted)
	}
	if containsAny(lower, queryWords) {
		s = secretQuery.ReplaceAllString(s, `${1}`+Redacted)
	}
	if containsAny(lower, bearerWords) {
		s = bearerToken.ReplaceAllString(s, `${1} `+Redacted)
	}
	return redactShapes(s)
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
