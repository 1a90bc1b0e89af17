package admin

// The admin endpoints about the relay's own settings: /debug/config (the
// effective configuration, secrets redacted) and /debug/loglevel.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"gopkg.in/yaml.v3"

	"github.com/xds-relay/xds-relay/config"
)

// Option configures Handler.
type Option func(*options)

type options struct {
	level    zap.AtomicLevel
	hasLevel bool
	token    *Token // nil: no token required (WithToken)
}

// WithLogLevel lets /debug/loglevel change the process log level at runtime:
// level must be the AtomicLevel the relay's logger was built with. Without it
// /debug/loglevel only reports the level and answers 501 to a change.
func WithLogLevel(level zap.AtomicLevel) Option {
	return func(o *options) {
		o.level = level
		o.hasLevel = true
	}
}

// Redacted replaces every secret value in RedactConfig.
const Redacted = "[redacted]"

// RedactConfig returns cfg keyed as the YAML file (the effective
// configuration served at /debug/config), with secrets replaced by
// Redacted: every channel_creds config value except file paths (keys ending
// in _file), every value whose key names a secret (key, secret, password,
// token, private, cert, pem, ...) unless it is a file path (_file, _path,
// _dir), and every inline PEM block anywhere. File paths are kept: they tell
// an operator where to look, not what is there.
func RedactConfig(cfg *config.Config) (map[string]any, error) {
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("relay: effective config: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("relay: effective config: %w", err)
	}
	out, _ := redact("", m, false).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	return out, nil
}

// redact returns v with secrets replaced; key is v's key in its parent map
// ("" in a list) and inCreds is true under a channel_creds entry's config.
func redact(key string, v any, inCreds bool) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			switch {
			case inCreds && !(isPathKey(k) && isString(x)):
				out[k] = Redacted
			case isSecretKey(k) && !(isPathKey(k) && isString(x)):
				out[k] = Redacted
			default:
				out[k] = redact(k, x, inCreds || (key == "" && k == "config" && v["type"] != nil))
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = redact("", x, inCreds)
		}
		return out
	case string:
		if strings.Contains(v, "-----BEGIN") || strings.Contains(v, "PRIVATE KEY") {
			return Redacted
		}
		return v
	default:
		return v
	}
}

func isString(v any) bool { _, ok := v.(string); return ok }

// keyWords splits a config key into its lower-case words: "caCertificate_file"
// → ["cacertificate", "file"] (underscores, dashes and dots separate words).
func keyWords(k string) []string {
	return strings.FieldsFunc(strings.ToLower(k), func(c rune) bool { return c == '_' || c == '-' || c == '.' })
}

// isPathKey reports whether k names a file or directory path.
func isPathKey(k string) bool {
	w := keyWords(k)
	if len(w) == 0 {
		return false
	}
	switch w[len(w)-1] {
	case "file", "files", "path", "dir", "filename":
		return true
	}
	return false
}

// isSecretKey reports whether one of k's words names secret material.
func isSecretKey(k string) bool {
	for _, w := range keyWords(k) {
		switch w {
		case "key", "secret", "secrets", "password", "passwd", "passphrase", "token", "private", "privatekey",
			"cert", "certificate", "pem", "bearer", "credential", "credentials", "apikey":
			return true
		}
	}
	return false
}

// logLevels are the levels /debug/loglevel accepts (the --log-level values).
var logLevels = []string{"debug", "info", "warn", "error"}

// logLevelAnswer is the JSON answer of /debug/loglevel.
type logLevelAnswer struct {
	Level    string `json:"level"`
	Previous string `json:"previous,omitempty"`
	Settable bool   `json:"settable"`
}

// serveLogLevel answers GET /debug/loglevel with the current level, and PUT
// or POST with a level (query or form "level=debug", or a JSON body
// {"level":"debug"} as zap's AtomicLevel handler takes) by changing it.
func (s *server) serveLogLevel(w http.ResponseWriter, req *http.Request) {
	current := s.log.Level()
	if s.o.hasLevel {
		current = s.o.level.Level()
	}
	if req.Method == http.MethodGet || req.Method == http.MethodHead {
		name := current.String()
		if current == zapcore.InvalidLevel {
			name = "off" // a logger with no level enabled, e.g. zap.NewNop()
		}
		s.writeJSON(w, logLevelAnswer{Level: name, Settable: s.o.hasLevel})
		return
	}
	if !s.o.hasLevel {
		writeText(w, http.StatusNotImplemented,
			"relay: the log level is fixed: the relay was built without admin.WithLogLevel\n")
		return
	}
	name, err := requestedLevel(w, req)
	if err != nil {
		writeText(w, http.StatusBadRequest, err.Error()+"\n")
		return
	}
	lvl, err := zapcore.ParseLevel(name)
	if err != nil || !slices.Contains(logLevels, lvl.String()) {
		writeText(w, http.StatusBadRequest, fmt.Sprintf("relay: log level %q: want one of %s\n",
			name, strings.Join(logLevels, ", ")))
		return
	}
	s.o.level.SetLevel(lvl)
	s.log.Info("log level changed", zap.Stringer("from", current), zap.Stringer("to", lvl),
		zap.String("remote", req.RemoteAddr))
	s.writeJSON(w, logLevelAnswer{Level: lvl.String(), Previous: current.String(), Settable: true})
}

// requestedLevel reads the level of a PUT or POST /debug/loglevel.
func requestedLevel(w http.ResponseWriter, req *http.Request) (string, error) {
	if l := req.URL.Query().Get("level"); l != "" {
		return l, nil
	}
	req.Body = http.MaxBytesReader(w, req.Body, 4096)
	if strings.HasPrefix(req.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		if err := req.ParseForm(); err != nil {
			return "", fmt.Errorf("relay: log level: %w", err)
		}
		if l := req.PostForm.Get("level"); l != "" {
			return l, nil
		}
		return "", errors.New("relay: log level: no level given (?level=debug)")
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return "", fmt.Errorf("relay: log level: %w", err)
	}
	var j struct {
		Level string `json:"level"`
	}
	if err := json.Unmarshal(body, &j); err != nil || j.Level == "" {
		return "", errors.New("relay: log level: no level given (?level=debug)")
	}
	return j.Level, nil
}
