package admin

import (
	"net/http"

	"github.com/swarmgate/swarmgate/internal/config"
)

// configDump serves the config in force as redacted YAML (config.Redacted):
// secrets appear as their references, never their values; webhook paths and
// credential-like header values are hidden.
func (s *Server) configDump(w http.ResponseWriter, _ *http.Request) {
	cfg := s.opts.Config()
	if cfg == nil {
		s.notWired(w, "config")
		return
	}
	out, err := dumpConfig(cfg)
	if err != nil {
		s.log.Error("admin: config dump", "err", err)
		s.writeJSON(w, http.StatusInternalServerError, errorBody{Error: "config dump failed"})
		return
	}
	w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
	_, _ = w.Write(out)
}

// dumpConfig is the one place that renders the config for humans.
func dumpConfig(cfg *config.Config) ([]byte, error) {
	return config.Redacted(cfg)
}
