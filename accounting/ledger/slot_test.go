package ledger

import (
	"strings"
	"testing"
	"time"
)

// clusterSlot is Redis Cluster's key slot: CRC16/XMODEM of the hash tag (the
// part between the first "{" and the next "}", when not empty) mod 16384.
func clusterSlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

func TestClusterSlot(t *testing.T) {
	// Reference values from the Redis Cluster specification.
	if got := clusterSlot("123456789"); got != 0x31C3%16384 {
		t.Fatalf("slot = %d", got)
	}
	if clusterSlot("{user1000}.following") != clusterSlot("{user1000}.followers") {
		t.Fatal("hash tags ignored")
	}
}

// Every key one record script touches is in the tenant's slot, so the
// script runs on Redis Cluster; different tenants spread over slots.
func TestRecordKeysShareASlot(t *testing.T) {
	for _, tenant := range []string{"acme", "beta", "a.b-c_d"} {
		e := Entry{RequestID: strings.Repeat("x", 100), Tenant: tenant, Time: time.Now()}
		keys, _ := scriptArgs(&e, Options{KeyPrefix: "sg:"})
		for _, k := range keys {
			if clusterSlot(k) != clusterSlot(keys[0]) {
				t.Fatalf("key %s in slot %d, %s in %d", k, clusterSlot(k), keys[0], clusterSlot(keys[0]))
			}
		}
	}
	if clusterSlot(MonthKey("sg:", "acme", "2026-12")) == clusterSlot(MonthKey("sg:", "beta", "2026-12")) {
		t.Fatal("two tenants share a slot (unlucky hash, or the tag is not per tenant)")
	}
}
