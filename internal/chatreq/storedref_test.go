package chatreq

import "testing"

// TestStoredRef: references to objects stored with the provider are found
// in each family's places for them, and what only looks like one is not.
func TestStoredRef(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"none", `{"model":"m","messages":[{"role":"user","content":"file_id"}]}`, ""},
		{"chat file part", `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}`, "file_id"},
		{"chat inline file", `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_data":"data:…","filename":"a.pdf"}}]}]}`, ""},
		{"responses input_file", `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}`, "file_id"},
		{"responses input_image", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}`, "file_id"},
		{"responses item_reference", `{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`, "item_reference"},
		{"responses escaped item_reference", `{"model":"m","input":[{"type":"item\u005freference","id":"msg_1"}]}`, "item_reference"},
		{"responses conversation", `{"model":"m","input":"hi","conversation":"conv_1"}`, "conversation"},
		{"responses conversation object", `{"model":"m","conversation":{"id":"conv_1"}}`, "conversation"},
		{"responses null conversation", `{"model":"m","conversation":null}`, ""},
		{"responses stored prompt", `{"model":"m","prompt":{"id":"pmpt_1","variables":{}}}`, "prompt"},
		{"completions prompt", `{"model":"m","prompt":["a","b"]}`, ""},
		{"file_search", `{"model":"m","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}`, "vector_store_ids"},
		{"code_interpreter stored container", `{"model":"m","tools":[{"type":"code_interpreter","container":"cntr_1"}]}`, "container"},
		{"code_interpreter auto container", `{"model":"m","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, ""},
		{"a tool whose parameter is named file_id", `{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"properties":{"file_id":{"type":"string"}}}}}]}`, ""},
		{"anthropic file source", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_1"}}]}]}`, "file_id"},
		{"anthropic base64 source", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`, ""},
		{"anthropic file in tool_result", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"document","source":{"type":"file","file_id":"f"}}]}]}]}`, "file_id"},
		{"anthropic container", `{"model":"m","max_tokens":5,"container":"container_1","messages":[]}`, "container"},
		{"the first one wins", `{"model":"m","conversation":"c","tools":[{"type":"file_search","vector_store_ids":[]}]}`, "conversation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Scan([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if r.StoredRef != tc.want {
				t.Fatalf("StoredRef %q, want %q", r.StoredRef, tc.want)
			}
		})
	}
}
