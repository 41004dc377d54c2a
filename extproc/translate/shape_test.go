package translate

import "github.com/swarmgate/swarmgate/extproc/family"

func shape(i int) family.ErrorShape {
	if i == 1 {
		return family.Anthropic
	}
	return family.OpenAI
}
