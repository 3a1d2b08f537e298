package server

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"time"
)

// ConsolePath is where the web console is served (see the package
// documentation, "Web console"); "/", and ConsolePath without its
// slash, redirect there.
const ConsolePath = "/console/"

//go:embed console
var consoleFiles embed.FS

// consoleCSP is the Content-Security-Policy of the console's files: its
// own scripts, styles and API only, no inline script, no image (it has
// none), no framing; and Trusted Types with no policy, so that a string
// written as HTML (innerHTML and the like) throws rather than renders.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'"

// consoleFile is one embedded file, with its strong validator.
type consoleFile struct {
	body  []byte
	ctype string
	etag  string
}

// consoleHandler serves the embedded console: GET only, no directory
// listing, an ETag per file (the files change only with the binary).
type consoleHandler struct {
	files map[string]consoleFile // by name under console/
}

func newConsoleHandler() *consoleHandler {
	h := &consoleHandler{files: map[string]consoleFile{}}
	_ = fs.WalkDir(consoleFiles, "console", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := consoleFiles.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ctype := mime.TypeByExtension(path.Ext(p))
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		h.files[p[len("console/"):]] = consoleFile{body: b, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	return h
}

func (h *consoleHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if name == "" {
		name = "index.html"
	}
	f, ok := h.files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", f.ctype)
	hd.Set("ETag", f.etag)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Content-Security-Policy", consoleCSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
}
