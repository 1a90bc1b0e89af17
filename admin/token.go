package admin

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// Token is the bearer token that the admin API's mutating and debug paths
// (POST and DELETE /drain, /debug/*: the log level, pprof, the client list)
// require when configured (admin_token_file). It is read from a file at
// LoadToken and read again when the file's size or modification time change
// (a rotated Kubernetes Secret); a file that no longer reads keeps the last
// token. Safe for concurrent use.
type Token struct {
	// set at creation, read-only
	path string

	mu      sync.Mutex
	token   []byte    // guarded by mu
	size    int64     // guarded by mu: of the file token was read from
	modTime time.Time // guarded by mu
}

// LoadToken reads the token of path: the file's content without surrounding
// white space, which must not be empty.
func LoadToken(path string) (*Token, error) {
	t := &Token{path: path}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("admin: token file: %w", err)
	}
	if err := t.read(fi); err != nil {
		return nil, err
	}
	return t, nil
}

// read reads the file whose state is fi. Called with mu held or before t is
// shared.
func (t *Token) read(fi os.FileInfo) error {
	b, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("admin: token file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return fmt.Errorf("admin: token file %s is empty", t.path)
	}
	t.token, t.size, t.modTime = b, fi.Size(), fi.ModTime()
	return nil
}

// current returns the token, read again if the file changed.
func (t *Token) current() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fi, err := os.Stat(t.path); err == nil && (fi.Size() != t.size || !fi.ModTime().Equal(t.modTime)) {
		_ = t.read(fi) // on an error the last token stays
	}
	return t.token
}

// allows reports whether req carries the token as "Authorization: Bearer
// TOKEN", compared in constant time.
func (t *Token) allows(req *http.Request) bool {
	got, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), t.current()) == 1
}

// guarded reports whether path needs the token: /drain and /debug/*. The
// probes (/healthz, /readyz, /metrics) and the status page stay open.
func guarded(path string) bool {
	return path == "/drain" || path == "/debug" || strings.HasPrefix(path, "/debug/")
}

// requireToken answers 401 to a call of a guarded path without the token.
func (s *server) requireToken(h http.Handler) http.Handler {
	if s.o.token == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if guarded(req.URL.Path) && !s.o.token.allows(req) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="xds-relay admin"`)
			writeText(w, http.StatusUnauthorized, "unauthorized: this path needs Authorization: Bearer <admin token>\n")
			return
		}
		h.ServeHTTP(w, req)
	})
}

// WithToken makes /drain and /debug/* require t (see Token).
func WithToken(t *Token) Option {
	return func(o *options) { o.token = t }
}
