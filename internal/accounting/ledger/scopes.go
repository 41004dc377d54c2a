package ledger

import "strings"

// Scopes besides the tenant: every entry also counts under the virtual key
// that made it (Entry.VirtualKeyID) and under each of its labels. Each
// scope has a day, a month and an all-time hash of plain counter fields
// ("req", "in", ...), and a month ranking (a sorted set scored by cost)
// that the status page reads for the keys and runs spending most. All of
// them carry the tenant's hash tag, so the record script stays in one slot,
// and all live as long as the tenant's counters (Options.Retention, renewed
// by every write), so a key or run that stops spending ages out.
//
// An entry touches at most 4 + 4*MaxLabels of these keys (BoundLabels), so
// the Redis keys an entry can create stay bounded like its labels.

// Periods of a scope hash. All-time is "since the scope first spent, while
// it keeps spending within the retention": a run spans hours, so its total
// is one read, not a sum of days.
const (
	periodDay   = "d:"
	periodMonth = "m:"
	periodAll   = "all"
)

// KeyScopeKey is one period's hash of a virtual key's counters: period is
// "d:2006-01-02", "m:2006-01" or "all".
func KeyScopeKey(prefix, tenant, period, keyID string) string {
	return TenantKey(prefix, tenant, "acct:vk:"+period+":"+keyID)
}

// LabelScopeKey is one period's hash of a label's counters.
func LabelScopeKey(prefix, tenant, period string, l Label) string {
	return TenantKey(prefix, tenant, "acct:lb:"+period+":"+l.member())
}

// keyRankKey is the month ranking of the tenant's virtual keys by cost.
func keyRankKey(prefix, tenant, month string) string {
	return TenantKey(prefix, tenant, "acct:top:vk:m:"+month)
}

// labelRankKey is the month ranking of one label name's values by cost
// (the runs spending most, for the name "run").
func labelRankKey(prefix, tenant, month, name string) string {
	return TenantKey(prefix, tenant, "acct:top:lb:m:"+month+":"+escapeLabelName(name))
}

// Label is one name=value pair of a sub-key's labels.
type Label struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// String is the label as the API and the CLI spell it, "run=nightly-42".
func (l Label) String() string { return l.Name + "=" + l.Value }

// member is the label inside a Redis key name: the name escaped so that the
// first "=" always ends it (sub-key validation refuses "=" in names; the
// escape keeps any other source of labels unambiguous too).
func (l Label) member() string { return escapeLabelName(l.Name) + "=" + l.Value }

// ParseLabel reads "name=value" (the value may be empty, the name not).
func ParseLabel(s string) (Label, bool) {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" || !labelFits(name, value) {
		return Label{}, false
	}
	return Label{Name: name, Value: value}, true
}

func escapeLabelName(name string) string {
	if !strings.ContainsAny(name, "%=") {
		return name
	}
	return strings.NewReplacer("%", "%25", "=", "%3D").Replace(name)
}
