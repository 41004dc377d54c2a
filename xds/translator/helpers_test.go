package translator

import (
	"path/filepath"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
)

func loadTestdata(t testing.TB, name string) *config.Config {
	t.Helper()
	cfg, err := config.Load(filepath.Join("testdata", name), config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatalf("loading %s: %v", name, err)
	}
	return cfg
}
