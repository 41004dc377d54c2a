// Package pairs is the table of translators the data path looks up: one
// per (client family, backend family) pair the config can route
// (config.TranslationTargets), each in a package of its own.
package pairs

import (
	"slices"

	"github.com/swarmgate/swarmgate/extproc/translate"
	"github.com/swarmgate/swarmgate/extproc/translate/chatmessages"
	"github.com/swarmgate/swarmgate/extproc/translate/messageschat"
	"github.com/swarmgate/swarmgate/extproc/translate/responseschat"
)

// all is built once and never changed: the translators are stateless.
var all = [...]*translate.Translator{
	messageschat.New(),
	chatmessages.New(),
	responseschat.New(),
}

// Lookup is the translator from the client's family to a backend family,
// nil when none exists.
func Lookup(from, to string) *translate.Translator {
	for _, t := range all {
		if t.From == from && t.To == to {
			return t
		}
	}
	return nil
}

// All is every translator, in no particular order (a copy: the table
// stays as built).
func All() []*translate.Translator { return slices.Clone(all[:]) }
