package deploy_test

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/config"
)

// section returns the Markdown of doc from the heading start to the next
// heading of the same level.
func section(t *testing.T, doc, start string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+start+"\n")
	if !ok {
		t.Fatalf("no heading %q", start)
	}
	level := start[:strings.IndexByte(start, ' ')+1]
	if i := strings.Index(rest, "\n"+level); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

var backticked = regexp.MustCompile("`([^`]+)`")

// The metrics table of OPERATIONS.md lists every relay family, and no other.
func TestOperationsMetricsTable(t *testing.T) {
	doc := section(t, string(read(t, "../docs/OPERATIONS.md")), "## Metrics")
	documented := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		if m := regexp.MustCompile("^\\| `(xds_relay_[a-z0-9_]+)` \\|").FindStringSubmatch(line); m != nil {
			documented[m[1]] = true
		}
	}
	for name := range registryNames(t) {
		if strings.HasPrefix(name, "xds_relay_") && !documented[name] {
			t.Errorf("OPERATIONS.md's metrics table lacks %s", name)
		}
		delete(documented, name)
	}
	for name := range documented {
		t.Errorf("OPERATIONS.md's metrics table lists %s, which the relay does not have", name)
	}
}

// configKeys returns the dotted paths of the config's YAML keys that hold
// values (not sections). It descends into sections, lists and maps of
// sections once per type (the authorities' servers are the default servers'
// shape), not into the shapes that the docs describe in words (credentials,
// authorization rules).
func configKeys(t reflect.Type, prefix string, seen map[reflect.Type]bool, out *[]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		et := f.Type
		for et.Kind() == reflect.Pointer || et.Kind() == reflect.Slice || et.Kind() == reflect.Map {
			et = et.Elem()
		}
		switch {
		case et.Kind() != reflect.Struct || et == reflect.TypeFor[time.Duration]() || seen[et],
			et == reflect.TypeFor[config.ChannelCreds](), et == reflect.TypeFor[config.CallCreds](),
			et == reflect.TypeFor[config.AuthzRule]():
			*out = append(*out, path)
		default:
			seen[et] = true
			configKeys(et, path, seen, out)
		}
	}
}

// Every config key is in OPERATIONS.md's configuration table: in a row of
// its own, or named in the row of its section.
func TestOperationsConfigTable(t *testing.T) {
	doc := section(t, string(read(t, "../docs/OPERATIONS.md")), "## Configuration and limits")
	type row struct {
		keys []string
		text string
	}
	var rows []row
	for _, line := range strings.Split(doc, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "`") {
			continue
		}
		var keys []string
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			keys = append(keys, m[1])
		}
		rows = append(rows, row{keys, line})
	}
	var keys []string
	configKeys(reflect.TypeFor[config.Config](), "", map[reflect.Type]bool{}, &keys)
	if len(keys) < 30 { // a sanity check of the walk
		t.Fatalf("only %d config keys found: %v", len(keys), keys)
	}
	for _, key := range keys {
		ok := false
		for _, r := range rows {
			if slices.Contains(r.keys, key) {
				ok = true
			}
			for _, k := range r.keys {
				if rest, under := strings.CutPrefix(key, k+"."); under && strings.Contains(r.text, "`"+rest+"`") {
					ok = true
				}
			}
		}
		if !ok && !strings.Contains(doc, "`"+key+"`") {
			t.Errorf("config key %s is not in OPERATIONS.md's configuration table", key)
		}
	}
}
