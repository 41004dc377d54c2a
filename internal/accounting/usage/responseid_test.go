package usage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResponseIDFromJSON(t *testing.T) {
	long := `"` + strings.Repeat("x", MaxResponseIDBytes+1) + `"`
	for _, tc := range []struct {
		name, body, want string
		ok               bool
	}{
		{"top-level id", `{"id":"resp_1","object":"response","output":[{"id":"msg_1"}]}`, "resp_1", true},
		{"id after nested ids", `{"output":[{"id":"msg_1","content":[{"id":"x"}]}],"meta":{"id":"no"},"id":"resp_2"}`, "resp_2", true},
		{"id inside a string only", `{"text":"\"id\":\"resp_3\""}`, "", false},
		{"null id", `{"id":null}`, "", false},
		{"empty id", `{"id":""}`, "", false},
		{"number id", `{"id":12}`, "", false},
		{"too long", `{"id":` + long + `}`, "", false},
		{"not an object", `["id","resp_1"]`, "", false},
		{"empty", ``, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, ok := ResponseID([]byte(tc.body))
			if ok != tc.ok || string(id) != tc.want {
				t.Fatalf("ResponseID = %q, %v; want %q, %v", id, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestResponseIDFromStream(t *testing.T) {
	fixture, err := os.ReadFile(filepath.Join("testdata", "families", "responses.sse"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, stream, want string
	}{
		{"fixture", string(fixture), "resp_1"},
		{"created wins over completed", "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_a\"}}\n\n" +
			"data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_b\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n", "resp_a"},
		{"completed only", "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_c\"}}\n\n", "resp_c"},
		{"nested item id is not the response's", "data: {\"type\":\"response.output_item.added\",\"item\":{\"id\":\"msg_1\"}}\n\n", ""},
		{"chat completions chunk", "data: {\"id\":\"chatcmpl-1\",\"choices\":[]}\n\n", ""},
		{"response id not a string", "data: {\"response\":{\"id\":7}}\n\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p StreamParser
			splits([]byte(tc.stream), 5, func(name string, chunks [][]byte) {
				if got := runParser(&p, chunks).respID; got != tc.want {
					t.Fatalf("%s: response id %q, want %q", name, got, tc.want)
				}
			})
		})
	}
}
