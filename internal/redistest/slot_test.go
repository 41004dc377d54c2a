package redistest

import "testing"

func TestSlot(t *testing.T) {
	// Reference values from the Redis Cluster specification.
	if got := Slot("123456789"); got != 0x31C3%16384 {
		t.Fatalf("slot = %d", got)
	}
	if Slot("{user1000}.following") != Slot("{user1000}.followers") {
		t.Fatal("hash tags ignored")
	}
	// An empty first tag means the whole key is hashed, not "bar".
	if Slot("foo{}{bar}") == Slot("bar") {
		t.Fatal("empty hash tag not ignored")
	}
}
