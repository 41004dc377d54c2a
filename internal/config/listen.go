package config

import (
	"errors"
	"fmt"
	"syscall"
)

// ListenError says which config field holds an address that could not be
// opened and, for a port already taken, how to move it: the first thing a
// newcomer meets when another program holds a default port.
func ListenError(field, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s: %s is already in use (another swarmgate, or another program): stop it, or set %s in a config file (--config-file, SWARMGATE_CONFIG_FILE): %w",
			field, addr, field, err)
	}
	return fmt.Errorf("%s: listen %s: %w", field, addr, err)
}
