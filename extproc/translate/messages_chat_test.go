package translate

import (
	"testing"

	"github.com/swarmgate/swarmgate/config"
)

func TestMessagesChatGolden(t *testing.T) {
	runGoldens(t, Lookup(config.FamilyAnthropicMessages, config.FamilyChatCompletions))
}
