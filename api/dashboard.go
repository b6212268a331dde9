package api

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"path"
	"time"
)

// The dashboard is one page and two assets compiled into the binary: it
// works on a machine with no internet and loads nothing from elsewhere.
//
//go:embed web/index.html web/dashboard.js web/dashboard.css
var web embed.FS

// asset is one embedded file, with a strong ETag so browsers revalidate
// cheaply.
type asset struct {
	body  []byte
	ctype string
	etag  string
}

var assets = func() map[string]asset {
	types := map[string]string{
		".html": "text/html; charset=utf-8",
		".js":   "text/javascript; charset=utf-8",
		".css":  "text/css; charset=utf-8",
	}
	out := map[string]asset{}
	entries, err := web.ReadDir("web")
	if err != nil {
		return out
	}
	for _, e := range entries {
		b, err := web.ReadFile("web/" + e.Name())
		if err != nil {
			continue
		}
		sum := sha256.Sum256(b)
		out[e.Name()] = asset{body: b, ctype: types[path.Ext(e.Name())], etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return out
}()

func (s *Server) dashboard(w http.ResponseWriter, r *http.Request) { s.serveAsset(w, r, "index.html") }

func (s *Server) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if name == "index.html" {
		name = "" // one address per page
	}
	s.serveAsset(w, r, name)
}

func (s *Server) serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	a, ok := assets[name]
	if !ok {
		s.writeError(w, http.StatusNotFound, "no such asset: "+r.URL.Path)
		return
	}
	w.Header().Set("Content-Type", a.ctype)
	w.Header().Set("ETag", a.etag)
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
}
