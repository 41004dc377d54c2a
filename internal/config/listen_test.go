package config

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
)

func TestListenError(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	_, lerr := net.Listen("tcp", addr)
	if lerr == nil {
		t.Fatal("a second listener on a taken port succeeded")
	}
	tests := []struct {
		err  error
		want []string
	}{
		{lerr, []string{"listen.xds: " + addr + " is already in use", "set listen.xds", "SWARMGATE_CONFIG_FILE"}},
		{errors.New("no such host"), []string{"listen.xds: listen " + addr + ": no such host"}},
	}
	for _, tc := range tests {
		got := ListenError("listen.xds", addr, tc.err)
		for _, w := range tc.want {
			if !strings.Contains(got.Error(), w) {
				t.Errorf("%q lacks %q", got, w)
			}
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("%v does not wrap %v", got, tc.err)
		}
	}
	if !errors.Is(ListenError("f", addr, lerr), syscall.EADDRINUSE) {
		t.Error("EADDRINUSE not kept")
	}
}
