package console

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// ui holds the built front end (web/ → `make web` → console/ui).
//
//go:embed ui
var ui embed.FS

// contentSecurityPolicy allows nothing but the EventForge server itself: no
// CDN, no inline script, no request elsewhere.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// assetHandler serves the embedded front end under /ui/. Paths that name no
// file get index.html, so the views' URLs (/ui/#/ops) always load.
func assetHandler() http.Handler {
	sub, err := fs.Sub(ui, "ui")
	if err != nil {
		panic(err) // the embedded path is a compile-time constant
	}
	files := http.FileServer(http.FS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", contentSecurityPolicy)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		name := strings.TrimPrefix(path.Clean(r.URL.Path), "/ui")
		name = strings.TrimPrefix(name, "/")
		if name == "" || name == "index.html" {
			serveIndex(w, sub)
			return
		}
		if _, err := fs.Stat(sub, name); err != nil {
			serveIndex(w, sub)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		files.ServeHTTP(w, r2)
	})
}

func serveIndex(w http.ResponseWriter, sub fs.FS) {
	b, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		http.Error(w, "console assets missing: run `make web`", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}
