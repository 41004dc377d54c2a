package translate

import (
	"strings"
	"testing"
)

func TestHostedToolLabel(t *testing.T) {
	for in, want := range map[string]string{
		"web_search": "web_search", "web_search_20250305": "web_search", "web_search_preview_2025_03_11": "web_search_preview",
		"computer_20250124": "computer", "code_execution_20250825": "code_execution", "file_search": "file_search",
		"text_editor_20250728": "text_editor", "whatever": "other", "": "other", "web_search_2025030x": "other",
	} {
		if got := HostedToolLabel(in); got != want {
			t.Errorf("HostedToolLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAppendDroppedHeader(t *testing.T) {
	v := ""
	for _, tt := range []string{"web_search", "file_search", "web_search", "bad\r\nx-evil: 1", ""} {
		v = AppendDroppedHeader(v, tt)
	}
	if want := "web_search,file_search,badx-evil1,other"; v != want {
		t.Errorf("got %q, want %q", v, want)
	}
	long := ""
	for i := 0; i < 100; i++ {
		long = AppendDroppedHeader(long, strings.Repeat("t", 10)+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	if len(long) > maxDroppedHeader {
		t.Errorf("header grew to %d bytes", len(long))
	}
}
