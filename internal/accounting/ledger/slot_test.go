package ledger

import (
	"strings"
	"testing"
	"time"

	"github.com/swarmgate/swarmgate/internal/redistest"
)

// Every key one record script touches is in the tenant's slot, so the
// script runs on Redis Cluster; different tenants spread over slots.
func TestRecordKeysShareASlot(t *testing.T) {
	for _, tenant := range []string{"acme", "beta", "a.b-c_d"} {
		e := Entry{RequestID: strings.Repeat("x", 100), Tenant: tenant, Time: time.Now(), VirtualKeyID: "sk_1",
			Labels: map[string]string{"run": "r{1}", "a=b": "c"}}
		keys, _ := scriptArgs(&e, Options{KeyPrefix: "sg:"})
		for _, k := range keys {
			if redistest.Slot(k) != redistest.Slot(keys[0]) {
				t.Fatalf("key %s in slot %d, %s in %d", k, redistest.Slot(k), keys[0], redistest.Slot(keys[0]))
			}
		}
	}
	if redistest.Slot(MonthKey("sg:", "acme", "2026-12")) == redistest.Slot(MonthKey("sg:", "beta", "2026-12")) {
		t.Fatal("two tenants share a slot (unlucky hash, or the tag is not per tenant)")
	}
}
