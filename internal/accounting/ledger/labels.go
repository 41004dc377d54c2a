package ledger

import (
	"slices"

	"github.com/swarmgate/swarmgate/internal/jsonstr"
)

// Bounds of the labels an entry carries: Redis keeps every entry for the
// dedupe period, so a key with many or long labels must not make each of
// its requests' records large.
const (
	MaxLabels          = 16
	MaxLabelNameBytes  = 64
	MaxLabelValueBytes = 128
)

// BoundLabels returns labels as an entry keeps them: at most MaxLabels,
// the first by name, leaving out any whose name or value is empty or too
// long. Labels already within bounds are returned as they are (no copy).
func BoundLabels(labels map[string]string) map[string]string {
	if withinBounds(labels) {
		return labels
	}
	out := make(map[string]string, min(len(labels), MaxLabels))
	for _, n := range sortedNames(labels) {
		if len(out) == MaxLabels {
			break
		}
		if v := labels[n]; labelFits(n, v) {
			out[n] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func withinBounds(labels map[string]string) bool {
	if len(labels) > MaxLabels {
		return false
	}
	for n, v := range labels {
		if !labelFits(n, v) {
			return false
		}
	}
	return true
}

func labelFits(name, value string) bool {
	return name != "" && len(name) <= MaxLabelNameBytes && len(value) <= MaxLabelValueBytes
}

func sortedNames(labels map[string]string) []string {
	names := make([]string, 0, len(labels))
	for n := range labels {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// appendLabels writes ,"labels":{...} sorted by name (nothing when there
// are none): the same entry always gives the same bytes.
func appendLabels(b []byte, labels map[string]string) []byte {
	if len(labels) == 0 {
		return b
	}
	b = append(b, `,"labels":{`...)
	for i, n := range sortedNames(labels) {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonstr.Append(b, n)
		b = append(b, ':')
		b = jsonstr.Append(b, labels[n])
	}
	return append(b, '}')
}
