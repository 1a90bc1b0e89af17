package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Defaults of the fields whose default is not their zero value.
const (
	DefaultListen              = ":18001"
	DefaultAdmin               = "127.0.0.1:9902"
	DefaultNodeID              = "xds-relay"
	DefaultNodeCluster         = "xds-relay"
	DefaultLinger              = 5 * time.Second
	DefaultUnavailableAfter    = 10 * time.Second
	DefaultDoesNotExistAfter   = 15 * time.Second
	DefaultMoveWait            = time.Second
	DefaultMaxUnreferenced     = 10000
	DefaultPersistInterval     = time.Second
	DefaultMaxNamesPerRequest  = 100000
	DefaultMaxRecvMessageBytes = 4 << 20
	// MinRecvMessageBytes is the least limits.max_recv_message_bytes: below
	// it an Envoy's first request, which carries its node, may not fit.
	MinRecvMessageBytes = 64 << 10

	DefaultMaxSubscriptionsPerStream = 100000
	DefaultMaxStreamsPerConnection   = 100
	DefaultNewStreamsPerSecond       = 5000
	DefaultMaxConnectionAge          = 30 * time.Minute
	DefaultKeepaliveMinTime          = 10 * time.Second

	DefaultCanaryFraction = 0.1
	DefaultRolloutHold    = 2 * time.Second
	DefaultDrainWindow    = 5 * time.Second
	// DefaultCertRefresh is how often TLS files are re-read when the config
	// does not say (gRPC's file_watcher default).
	DefaultCertRefresh = 10 * time.Minute
)

// Default returns a new Config holding every default. It has no upstream
// server, so it does not validate until one is added.
func Default() *Config {
	return &Config{
		Listen: DefaultListen,
		Admin:  DefaultAdmin,
		Node:   Node{ID: DefaultNodeID, Cluster: DefaultNodeCluster},
		Upstream: Upstream{
			Linger:            DefaultLinger,
			UnavailableAfter:  DefaultUnavailableAfter,
			DoesNotExistAfter: DefaultDoesNotExistAfter,
			MoveWait:          DefaultMoveWait,
		},
		Cache:    Cache{MaxUnreferenced: DefaultMaxUnreferenced, PersistInterval: DefaultPersistInterval},
		Shutdown: Shutdown{DrainWindow: DefaultDrainWindow},
		Limits: Limits{
			MaxNamesPerRequest:        DefaultMaxNamesPerRequest,
			MaxRecvMessageBytes:       DefaultMaxRecvMessageBytes,
			MaxSubscriptionsPerStream: DefaultMaxSubscriptionsPerStream,
			MaxStreamsPerConnection:   DefaultMaxStreamsPerConnection,
			NewStreamsPerSecond:       DefaultNewStreamsPerSecond,
			MaxConnectionAge:          DefaultMaxConnectionAge,
			KeepaliveMinTime:          DefaultKeepaliveMinTime,
		},
	}
}

// FieldError is an error about one field of the configuration.
type FieldError struct {
	// Field is the field's path in the file, e.g.
	// "upstream.xds_servers[0].server_uri" or `upstream.authorities["a"]`.
	Field string
	// Msg says what is wrong.
	Msg string
	// Line is the line of the file, or 0 when unknown (Validate).
	Line int
}

// Error formats e as "config: FIELD: MSG" with the line when known.
func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("config: %s: %s (line %d)", e.Field, e.Msg, e.Line)
	}
	return fmt.Sprintf("config: %s: %s", e.Field, e.Msg)
}

// Load reads the YAML file at path and parses it with Parse. It does not
// validate.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, InFile(err, path)
	}
	return cfg, nil
}

// InFile adds " (in PATH)" to err, to each error when err joins several.
func InFile(err error, path string) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = fmt.Errorf("%w (in %s)", e, path)
		}
		return errors.Join(out...)
	}
	return fmt.Errorf("%w (in %s)", err, path)
}

// Parse decodes YAML over Default. Unknown keys, values of the wrong kind and
// more than one document are errors naming the field (every one of them,
// joined with errors.Join); durations are written like "5s". An empty
// document yields the defaults. A key that is present keeps its value, zero
// included; an optional section that is present (rollout, rest, gateway)
// starts from its defaults. With upstream.bootstrap_file, the servers are read from that
// file (see Upstream.LoadBootstrap). Parse does not validate: call Validate,
// or use ParseAll to report the file's problems and Validate's together.
func Parse(data []byte) (*Config, error) {
	cfg, _, err := ParseAll(data)
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// LoadAll is Load for ParseAll: it reads the YAML file at path and parses it,
// keeping what the file's good keys say when others are bad.
func LoadAll(path string) (*Config, *Locations, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	cfg, locs, err := ParseAll(data)
	if err != nil {
		return cfg, locs, InFile(err, path)
	}
	return cfg, locs, nil
}

// ParseAll is Parse for reporting every problem at once. It also returns
// where each field of the file is, and when the file has unknown keys or
// values of the wrong kind it returns their errors together with the Config
// decoded from the rest of the file (those keys left at their defaults), so
// that Validate can check the rest: join both with Locations.Report. The
// Config is nil when the file cannot be decoded at all (a YAML syntax
// error, a duplicate key, more than one document) and when its only problem
// is its bootstrap file; the Locations are never nil.
func ParseAll(data []byte) (*Config, *Locations, error) {
	cfg := Default()
	locs := &Locations{lines: map[string]int{}}

	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return cfg, locs, nil
		}
		return nil, locs, yamlError(err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, locs, yamlError(err)
	case !isNull(document(&next)):
		return nil, locs, fmt.Errorf("config: line %d: more than one YAML document", next.Line)
	}

	root := document(&doc)
	if isNull(root) {
		return cfg, locs, nil
	}
	w := walker{seen: map[seenKey]bool{}, locs: locs}
	w.check(root, reflect.TypeFor[Config](), "")
	if len(w.errs) > 0 {
		// The walk left the bad keys and values out of the tree: decode
		// the rest, so that Validate sees what the file's good keys say.
		cfg, err := decodeNode(root)
		if err != nil {
			return nil, locs, errors.Join(append(w.errs, err)...)
		}
		if err := readBootstrap(cfg); err != nil {
			w.errs = append(w.errs, err)
		}
		return cfg, locs, errors.Join(w.errs...)
	}

	// The walk above found every error with its path; decode for real, over
	// the defaults of the optional sections the file has: yaml.v3 decodes
	// into a non-nil pointer's value, so their absent keys keep a default
	// and their present ones, zero included, are kept.
	sections := presentSections(root)
	withSectionDefaults(cfg, sections)
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(cfg); err != nil {
		return nil, locs, yamlError(err)
	}
	fillSections(cfg, sections)
	if err := readBootstrap(cfg); err != nil {
		return nil, locs, err
	}
	return cfg, locs, nil
}

// readBootstrap reads upstream.bootstrap_file, when set, into cfg's servers.
func readBootstrap(cfg *Config) error {
	f := cfg.Upstream.BootstrapFile
	if f == "" {
		return nil
	}
	if len(cfg.Upstream.XDSServers) > 0 || len(cfg.Upstream.Authorities) > 0 {
		return &FieldError{Field: "upstream.bootstrap_file",
			Msg: "set either bootstrap_file or xds_servers and authorities, not both"}
	}
	return cfg.Upstream.LoadBootstrap(f)
}

// decodeNode decodes root, a tree the walker checked and pruned, over the
// defaults.
func decodeNode(root *yaml.Node) (*Config, error) {
	cfg := Default()
	sections := presentSections(root)
	withSectionDefaults(cfg, sections)
	if err := root.Decode(cfg); err != nil {
		return nil, yamlError(err)
	}
	fillSections(cfg, sections)
	return cfg, nil
}

// withSectionDefaults gives the optional sections present in the file their
// defaults, before decoding over them.
func withSectionDefaults(cfg *Config, sections map[string]bool) {
	if sections["rollout"] {
		cfg.Rollout = defaultRollout()
	}
	if sections["rest"] {
		cfg.REST = defaultREST()
	}
	if sections["gateway"] {
		cfg.Gateway = defaultGateway()
	}
}

// fillSections makes a section written without a value ("tls:"), which
// decodes as nil, present, so that Validate checks it as it does a full one.
func fillSections(cfg *Config, sections map[string]bool) {
	if sections["keying"] && cfg.Keying == nil {
		cfg.Keying = &Keying{}
	}
	if sections["rollout"] && cfg.Rollout == nil {
		cfg.Rollout = defaultRollout()
	}
	if sections["tls"] && cfg.TLS == nil {
		cfg.TLS = &TLS{}
	}
	if sections["rest"] && cfg.REST == nil {
		cfg.REST = defaultREST()
	}
	if sections["gateway"] && cfg.Gateway == nil {
		cfg.Gateway = defaultGateway()
	}
}

func defaultRollout() *Rollout {
	return &Rollout{CanaryFraction: DefaultCanaryFraction, Hold: DefaultRolloutHold}
}

// presentSections returns the top-level keys of the file.
func presentSections(root *yaml.Node) map[string]bool {
	out := make(map[string]bool)
	for i := 0; i+1 < len(root.Content); i += 2 {
		out[root.Content[i].Value] = true
	}
	return out
}

// yamlError turns a yaml.v3 error into a one-line error.
func yamlError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return fmt.Errorf("config: %s", strings.Join(te.Errors, "; "))
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	return fmt.Errorf("config: %s", strings.Join(strings.Fields(msg), " "))
}

// document returns the content of a document node.
func document(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		return n.Content[0]
	}
	return n
}

// isNull reports whether n is absent or a YAML null.
func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

var durationType = reflect.TypeFor[time.Duration]()

// walker checks a YAML tree against the Config type before decoding, so that
// every unknown key and every value of the wrong kind is reported with its
// field path (yaml.v3 reports only a line and a Go type).
type walker struct {
	// seen holds the anchored nodes already checked against a type, so that
	// aliases cost nothing (no "billion laughs").
	seen map[seenKey]bool
	// errs are the problems found, in document order.
	errs []error
	// locs records the line of every field path and the paths of errs.
	locs *Locations
}

type seenKey struct {
	n *yaml.Node
	t reflect.Type
}

// fail records a problem of the value at path and, so that decoding the tree
// afterwards skips it, makes that value null: yaml.v3 then leaves the field
// at its default. n is changed in place: an alias, not what it points at, when
// the alias is where the value is wrong.
func (w *walker) fail(path string, n *yaml.Node, msg string) {
	w.errs = append(w.errs, fieldErr(path, n, msg))
	w.locs.reported = append(w.locs.reported, path)
	*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: n.Line, Column: n.Column}
}

// unknown records an unknown key; the caller drops it from its mapping.
func (w *walker) unknown(path string, k *yaml.Node) {
	w.errs = append(w.errs, fieldErr(path, k, "unknown field"))
	w.locs.reported = append(w.locs.reported, path)
}

// at records the line of the field at path (the first place it is written).
func (w *walker) at(path string, n *yaml.Node) {
	if _, ok := w.locs.lines[path]; !ok && n.Line > 0 {
		w.locs.lines[path] = n.Line
	}
}

// check records every problem of n as a value of type t at path.
func (w *walker) check(n *yaml.Node, t reflect.Type, path string) {
	at := n // errors point at the alias, not at its anchor
	for n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return
		}
		n = n.Alias
	}
	if n.Anchor != "" {
		k := seenKey{n, t}
		if w.seen[k] {
			return
		}
		w.seen[k] = true
	}
	if isNull(n) {
		return // yaml.v3 leaves scalars and structs alone on null
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem() // an optional section: checked as its struct
	}
	switch {
	case isStruct(t):
		if n.Kind != yaml.MappingNode {
			w.fail(path, at, "must be a mapping")
			// An empty mapping, not null: yaml.v3 drops a null element of a
			// list, and the next elements' indices would move.
			at.Kind, at.Tag = yaml.MappingNode, "!!map"
			return
		}
		kept := n.Content[:0]
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.ShortTag() == "!!merge" {
				w.checkMerge(v, t, path)
				if !isNull(v) {
					kept = append(kept, k, v)
				}
				continue
			}
			f, ok := fieldByKey(t, k.Value)
			if !ok {
				w.unknown(join(path, k.Value), k)
				continue
			}
			w.at(join(path, k.Value), k)
			w.check(v, f.Type, join(path, k.Value))
			kept = append(kept, k, v)
		}
		n.Content = kept
	case t.Kind() == reflect.Slice && isStruct(t.Elem()):
		if n.Kind != yaml.SequenceNode {
			w.fail(path, at, "must be a list")
			return
		}
		for i, c := range n.Content {
			w.at(fmt.Sprintf("%s[%d]", path, i), c)
			w.check(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case t.Kind() == reflect.Map && isStruct(t.Elem()):
		if n.Kind != yaml.MappingNode {
			w.fail(path, at, "must be a mapping")
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				w.fail(path, at, "keys must be strings")
				return
			}
			w.at(fmt.Sprintf("%s[%q]", path, k.Value), k)
			w.check(v, t.Elem(), fmt.Sprintf("%s[%q]", path, k.Value))
		}
	default:
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			w.fail(path, at, "must be "+describe(t))
		}
	}
}

// checkMerge checks the value of a "<<" merge key: a mapping or a list of them.
func (w *walker) checkMerge(v *yaml.Node, t reflect.Type, path string) {
	for v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	if v.Kind == yaml.SequenceNode {
		for _, c := range v.Content {
			w.check(c, t, path)
		}
		return
	}
	w.check(v, t, path)
}

func isStruct(t reflect.Type) bool { return t.Kind() == reflect.Struct && t != durationType }

// fieldByKey finds the field of struct type t whose yaml tag names key.
func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == key && name != "" && name != "-" {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// join appends key to path, quoted unless it is a plain identifier.
func join(path, key string) string {
	if key == "" || strings.ContainsFunc(key, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func fieldErr(path string, n *yaml.Node, msg string) *FieldError {
	if path == "" {
		path = "(top level)"
	}
	return &FieldError{Field: path, Msg: msg, Line: n.Line}
}

// describe names the kind of value a field of type t takes.
func describe(t reflect.Type) string {
	switch {
	case t == durationType:
		return `a duration like "5s"`
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return "an integer"
	case t.Kind() == reflect.Slice:
		return "a list of " + strings.TrimPrefix(describe(t.Elem()), "a ") + "s"
	case t.Kind() == reflect.Map && t.Elem().Kind() == reflect.String:
		return "a mapping of strings"
	case t.Kind() == reflect.Map:
		return "a mapping"
	default:
		return "a " + t.String()
	}
}
