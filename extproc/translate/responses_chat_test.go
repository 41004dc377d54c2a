package translate

import (
	"testing"

	"github.com/swarmgate/swarmgate/config"
)

func responsesChatTranslator(tb testing.TB) *Translator {
	tb.Helper()
	tr := Lookup(config.FamilyResponses, config.FamilyChatCompletions)
	if tr == nil {
		tb.Fatal("responses → chat completions not registered")
	}
	return tr
}

func TestResponsesChatGolden(t *testing.T) {
	runGoldens(t, responsesChatTranslator(t))
}
