package admin

import (
	"embed"
	"io/fs"
	"net/http"
)

// The status page is plain HTML, CSS and JS with no external assets, so it
// works on an air-gapped admin port. It polls /readyz, /keys, /budgets,
// /admission, /refusals and /usage's month rankings of keys and runs; with
// the admin token, every 30 s, /v1/keys and /usage?key= for the sub-keys'
// stored budgets.
//
//go:embed static
var staticFiles embed.FS

func (s *Server) statusRoutes(mux *http.ServeMux) {
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory
	}
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(sub)))
	page := func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, sub, "index.html")
	}
	mux.HandleFunc("GET /{$}", page)
	mux.HandleFunc("GET /status", page)
}
