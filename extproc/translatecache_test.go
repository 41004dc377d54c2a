package extproc

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/extproc/translate/pairs"
)

func TestTranslationCache(t *testing.T) {
	key := func(id string, body []byte) translationKey {
		return translationKey{requestID: id, model: "m", body: bodyHash(body), size: len(body)}
	}
	body := []byte(`{"model":"m"}`)
	t.Run("taken once", func(t *testing.T) {
		var c translationCache
		c.put(key("r1", body), keptTranslation{body: []byte("out"), dropped: []string{"web_search"}})
		if _, ok := c.take(key("r2", body)); ok {
			t.Fatal("another request's translation taken")
		}
		if _, ok := c.take(key("r1", []byte(`{"model":"m","stream_options":{}}`))); ok {
			t.Fatal("a translation of another body taken")
		}
		got, ok := c.take(key("r1", body))
		if !ok || string(got.body) != "out" || len(got.dropped) != 1 {
			t.Fatalf("take: %+v %v", got, ok)
		}
		if _, ok := c.take(key("r1", body)); ok {
			t.Fatal("taken twice")
		}
		if c.bytes != 0 {
			t.Errorf("bytes %d after every entry was taken", c.bytes)
		}
	})
	t.Run("oldest out by count", func(t *testing.T) {
		var c translationCache
		for i := range translationsMaxEntries + 1 {
			c.put(key(strconv.Itoa(i), body), keptTranslation{body: []byte("x")})
		}
		if _, ok := c.take(key("0", body)); ok {
			t.Error("the oldest entry was kept past the bound")
		}
		if _, ok := c.take(key(strconv.Itoa(translationsMaxEntries), body)); !ok {
			t.Error("the newest entry was dropped")
		}
		if len(c.entries) > translationsMaxEntries || len(c.order) > 2*translationsMaxEntries {
			t.Errorf("%d entries, %d keys in order", len(c.entries), len(c.order))
		}
	})
	t.Run("oldest out by bytes", func(t *testing.T) {
		var c translationCache
		big := bytes.Repeat([]byte("x"), translationsMaxBytes/4)
		for i := range 5 {
			c.put(key(strconv.Itoa(i), body), keptTranslation{body: big})
		}
		if c.bytes > translationsMaxBytes {
			t.Errorf("%d bytes kept, bound %d", c.bytes, translationsMaxBytes)
		}
		if _, ok := c.take(key("0", body)); ok {
			t.Error("the oldest entry was kept past the byte bound")
		}
		c.put(key("huge", body), keptTranslation{body: append(big, 'x')})
		if _, ok := c.take(key("huge", body)); ok {
			t.Error("a translation above a quarter of the bound was kept")
		}
	})
}

// TestRefusedHostedToolsTranslateAsDropped: the router checks with
// RefuseHosted where an attempt translates with DropHosted (a native
// target exists); the key leaves the policy out because a body the check
// accepted translates to the same bytes either way.
func TestRefusedHostedToolsTranslateAsDropped(t *testing.T) {
	bodies := map[string]string{
		"anthropic_messages": `{"model":"m","max_tokens":10,"tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]}`,
		"responses":          `{"model":"m","input":"hi","tools":[{"type":"function","name":"f","parameters":{}}],"tool_choice":"auto"}`,
		"chat_completions":   `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
	}
	for from, to := range map[string]string{"anthropic_messages": "chat_completions", "responses": "chat_completions", "chat_completions": "anthropic_messages"} {
		tr := pairs.Lookup(from, to)
		if tr == nil {
			t.Fatalf("no translator %s → %s", from, to)
		}
		refused, err1 := tr.Request([]byte(bodies[from]), translate.RequestOptions{Model: "up", DefaultMaxTokens: 100, Hosted: translate.RefuseHosted})
		dropped, err2 := tr.Request([]byte(bodies[from]), translate.RequestOptions{Model: "up", DefaultMaxTokens: 100, Hosted: translate.DropHosted})
		if err1 != nil || err2 != nil || !bytes.Equal(refused, dropped) {
			t.Errorf("%s → %s: %s (%v) vs %s (%v)", from, to, refused, err1, dropped, err2)
		}
	}
}
