package translate

import "strings"

// Hosted tools: tools the backend family cannot run or express (the
// provider runs them, or only the provider's models know their schema).
// A translation refuses or drops them as RequestOptions.Hosted says; the
// dropped ones are named to the client in a response header and counted
// in a metric, both through the helpers here.

// hostedLabels are the tool kinds a metric label may name; any other type
// a client sends is counted as "other", so a client cannot grow the
// metric's label set.
var hostedLabels = []string{
	// Responses API.
	"web_search", "web_search_preview", "file_search", "code_interpreter", "computer_use_preview", "computer",
	"image_generation", "mcp", "local_shell", "shell", "custom", "tool_search", "apply_patch",
	// Anthropic Messages (without their version dates).
	"web_fetch", "code_execution", "bash", "text_editor", "memory", "tool_search_tool_regex", "tool_search_tool_bm25",
}

// HostedToolLabel is a dropped tool type as a bounded metric label: its
// kind without a trailing version date (web_search_20250305 → web_search),
// or "other".
func HostedToolLabel(toolType string) string {
	t := toolType
	if i := strings.LastIndexByte(t, '_'); i > 0 && len(t)-i == 9 && allDigits(t[i+1:]) {
		t = t[:i] // web_search_20250305
	} else if n := len(t); n > 11 && t[n-11] == '_' && t[n-6] == '_' && t[n-3] == '_' &&
		allDigits(t[n-10:n-6]) && allDigits(t[n-5:n-3]) && allDigits(t[n-2:]) {
		t = t[:n-11] // web_search_preview_2025_03_11
	}
	for _, l := range hostedLabels {
		if t == l {
			return l
		}
	}
	return "other"
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// maxDroppedHeader bounds the dropped-tools header value.
const maxDroppedHeader = 512

// AppendDroppedHeader appends a dropped tool type to a comma-separated
// header value, once per type, keeping only characters a tool type is
// made of ([A-Za-z0-9_.-]) and at most 512 bytes, so a client's tool
// types cannot break the header.
func AppendDroppedHeader(v, toolType string) string {
	var b strings.Builder
	for i := 0; i < len(toolType); i++ {
		c := toolType[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' {
			b.WriteByte(c)
		}
	}
	t := b.String()
	if t == "" {
		t = "other"
	}
	for _, have := range strings.Split(v, ",") {
		if have == t {
			return v
		}
	}
	if v != "" {
		t = "," + t
	}
	if len(v)+len(t) > maxDroppedHeader {
		return v
	}
	return v + t
}
