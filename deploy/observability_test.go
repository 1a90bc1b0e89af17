package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/xds-relay/xds-relay/internal/metrics"
)

// unusedFamilies are relay metric families the dashboard need not show,
// with the reason. Empty: the dashboard shows every family.
var unusedFamilies = map[string]string{}

// registryNames returns the metric family names of a fresh metrics.New()
// registry after one observation of every labelled vector (a vector has no
// family until it has a child), found by reflection so that new vectors are
// covered without changing this test.
func registryNames(t *testing.T) map[string]bool {
	t.Helper()
	m := metrics.New()
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		get := v.Field(i).MethodByName("GetMetricWithLabelValues")
		if !get.IsValid() {
			continue
		}
		// Try label counts until the vector accepts one.
		ok := false
		for n := 0; n <= 8 && !ok; n++ {
			args := make([]reflect.Value, n)
			for j := range args {
				args[j] = reflect.ValueOf("x")
			}
			out := get.Call(args)
			ok = out[1].IsNil()
		}
		if !ok {
			t.Fatalf("metrics.%s: no label count accepted", v.Type().Field(i).Name)
		}
	}
	// The families collected from the relay's state at each scrape.
	m.CollectUpstreamConnected(func() []metrics.UpstreamConn {
		return []metrics.UpstreamConn{{Server: "x", Scope: metrics.ScopeShared}}
	})
	m.CollectUpstreamFallback(func() []metrics.UpstreamFallback {
		return []metrics.UpstreamFallback{{Scope: metrics.ScopeShared}}
	})
	m.CollectReadiness(func() bool { return true }, func() bool { return true })
	m.CollectCache(func() []metrics.CacheSize { return []metrics.CacheSize{{TypeURL: "x"}} })
	m.CollectSync(func() []metrics.SyncCount { return []metrics.SyncCount{{TypeURL: "x"}} })
	m.CollectConnections(func() int { return 0 })
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	return names
}

// metricRef matches the metric names an expression uses: the relay's own
// and the Go and process collectors' (registered on the same registry).
var metricRef = regexp.MustCompile(`\b(?:xds_relay|go|process)_[a-zA-Z0-9_]*[a-zA-Z0-9]\b`)

// checkMetrics fails the test for every metric name in expr that the
// registry does not have (histogram series suffixes stripped), and returns
// the names it found.
func checkMetrics(t *testing.T, where, expr string, names map[string]bool) []string {
	t.Helper()
	var found []string
	for _, ref := range metricRef.FindAllString(expr, -1) {
		name := ref
		if !names[name] {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(name, suffix); ok && names[base] {
					name = base
				}
			}
		}
		if !names[name] {
			t.Errorf("%s: metric %s does not exist in the relay's registry: %s", where, ref, expr)
			continue
		}
		found = append(found, name)
	}
	return found
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int             `json:"id"`
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Datasource  json.RawMessage `json:"datasource"`
	GridPos     struct{ H, W, X, Y int }
	FieldConfig struct {
		Defaults struct {
			Thresholds struct {
				Steps []struct {
					Color string   `json:"color"`
					Value *float64 `json:"value"`
				} `json:"steps"`
			} `json:"thresholds"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// rowsInOrder are the dashboard's rows, top to bottom.
var rowsInOrder = []string{"Overview", "Clients (downstream)", "Upstreams", "Cache", "Rollouts", "gateway.control.v1", "Load reporting (LRS)", "Process", "Warm-restart files"}

func TestDashboardMetricsExist(t *testing.T) {
	names := registryNames(t)
	data := read(t, "grafana/xds-relay-dashboard.json")
	if !json.Valid(data) {
		t.Fatal("dashboard is not JSON")
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard uid %q title %q with %d panels", d.UID, d.Title, len(d.Panels))
	}

	used := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Datasource) == 0 || len(p.Targets) == 0 {
			t.Errorf("panel %q: no datasource or no targets", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Expr == "" || refs[tg.RefID] {
				t.Errorf("panel %q: empty expr or duplicate refId %q", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			for _, n := range checkMetrics(t, "panel "+p.Title, tg.Expr, names) {
				used[n] = true
			}
		}
	}
	for _, v := range d.Templating.List {
		checkMetrics(t, "variable "+v.Name, v.Definition, names)
	}

	// Variables namespace and pod select the relays, and every query honours
	// them.
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	if !slices.Equal(vars, []string{"datasource", "namespace", "pod"}) {
		t.Errorf("variables %v, want datasource, namespace, pod", vars)
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `namespace=~"$namespace"`) || !strings.Contains(tg.Expr, `pod=~"$pod"`) {
				t.Errorf("panel %q: query does not select $namespace and $pod: %s", p.Title, tg.Expr)
			}
		}
		// A stat panel colours its value: thresholds with at least a base.
		if p.Type == "stat" {
			steps := p.FieldConfig.Defaults.Thresholds.Steps
			if len(steps) == 0 || steps[0].Value != nil {
				t.Errorf("stat panel %q: thresholds %+v, want steps from a base (null) value", p.Title, steps)
			}
			for i := 1; i < len(steps); i++ {
				if steps[i].Value == nil || (i > 1 && *steps[i].Value <= *steps[i-1].Value) {
					t.Errorf("stat panel %q: threshold steps not increasing", p.Title)
				}
			}
		}
	}

	// Rows in order, each panel in the band of its row, the process row
	// only with process metrics.
	ps := slices.Clone(d.Panels)
	slices.SortStableFunc(ps, func(a, b panel) int {
		if a.GridPos.Y != b.GridPos.Y {
			return a.GridPos.Y - b.GridPos.Y
		}
		return a.GridPos.X - b.GridPos.X
	})
	var rows []string
	for _, p := range ps {
		if p.Type == "row" {
			rows = append(rows, p.Title)
			continue
		}
		if len(rows) == 0 {
			t.Errorf("panel %q is above the first row", p.Title)
			continue
		}
		if rows[len(rows)-1] == "Process" {
			for _, tg := range p.Targets {
				if strings.Contains(tg.Expr, "xds_relay_") {
					t.Errorf("panel %q in the Process row shows relay metrics: %s", p.Title, tg.Expr)
				}
			}
		}
	}
	if !slices.Equal(rows, rowsInOrder) {
		t.Errorf("rows %v, want %v", rows, rowsInOrder)
	}
	for i, p := range ps {
		if p.Type == "row" {
			continue
		}
		for _, q := range ps[i+1:] {
			if q.Type == "row" && q.GridPos.Y < p.GridPos.Y+p.GridPos.H {
				t.Errorf("panel %q overlaps row %q below it", p.Title, q.Title)
			}
		}
	}

	// Every relay family is on the dashboard.
	for name := range names {
		if strings.HasPrefix(name, "xds_relay_") && !used[name] && unusedFamilies[name] == "" {
			t.Errorf("metric %s is on no dashboard panel", name)
		}
	}
}

// alertRules is a Prometheus rule file, decoded strictly.
type alertRules struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []struct {
			Alert         string            `json:"alert,omitempty"`
			Record        string            `json:"record,omitempty"`
			Expr          string            `json:"expr"`
			For           string            `json:"for,omitempty"`
			KeepFiringFor string            `json:"keep_firing_for,omitempty"`
			Labels        map[string]string `json:"labels,omitempty"`
			Annotations   map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

// githubAnchors returns the anchors GitHub derives from the Markdown
// headings of doc: lower case, spaces to dashes, punctuation dropped.
func githubAnchors(doc []byte) map[string]bool {
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range bytes.Split(doc, []byte("\n")) {
		h, ok := bytes.CutPrefix(line, []byte("#"))
		if !ok {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(string(h), "#"))
		a := drop.ReplaceAllString(strings.ToLower(title), "")
		out[strings.ReplaceAll(a, " ", "-")] = true
	}
	return out
}

// runbookBase is the default base of the alerts' runbook links: an absolute
// URL of docs/OPERATIONS.md, overridden by the external label runbook_base.
const runbookBase = "{{ with $externalLabels.runbook_base }}{{ . }}{{ else }}" +
	"https://github.com/xds-relay/xds-relay/blob/main/docs/OPERATIONS.md{{ end }}"

var runbookURL = regexp.MustCompile(`^` + regexp.QuoteMeta(runbookBase) + `#([a-z0-9-]+)$`)

// The alerts an operator needs, at least.
var requiredAlerts = []string{"XdsRelayDown", "XdsRelayAbsent", "XdsRelayUpstreamNeverConnected",
	"XdsRelayUpstreamDisconnected", "XdsRelayRolloutHalted", "XdsRelayMemoryNearLimit"}

func TestAlertRules(t *testing.T) {
	names := registryNames(t)
	var rules alertRules
	if err := yaml.UnmarshalStrict(read(t, "prometheus/alerts.yaml"), &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	anchors := githubAnchors(read(t, "../docs/OPERATIONS.md"))
	seen := map[string]bool{}
	count := 0
	for _, g := range rules.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: want a name and rules", g.Name)
		}
		for _, r := range g.Rules {
			count++
			where := "alert " + r.Alert
			if (r.Alert == "") == (r.Record == "") {
				t.Errorf("rule %q/%q: exactly one of alert and record", r.Alert, r.Record)
			}
			if seen[r.Alert] {
				t.Errorf("%s defined twice", where)
			}
			seen[r.Alert] = true
			if len(checkMetrics(t, where, r.Expr, names)) == 0 && !strings.Contains(r.Expr, "up{") {
				t.Errorf("%s: uses no relay metric: %s", where, r.Expr)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", where, r.For, err)
				}
			}
			if r.Alert == "" {
				continue
			}
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("%s: severity %q, want critical, warning or info", where, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want summary and description annotations", where)
			}
			for k, text := range r.Annotations {
				if out := renderAnnotation(t, where+" "+k, text); strings.Contains(out, "''") {
					t.Errorf("%s: %s names an empty label with the default servers' authority: %s", where, k, out)
				}
			}
			m := runbookURL.FindStringSubmatch(r.Annotations["runbook_url"])
			if m == nil || !anchors[m[1]] {
				t.Errorf("%s: runbook_url %q is not %s#ANCHOR with a heading of docs/OPERATIONS.md",
					where, r.Annotations["runbook_url"], runbookBase)
			}
		}
	}
	if count == 0 {
		t.Fatal("no rules")
	}
	for _, a := range requiredAlerts {
		if !seen[a] {
			t.Errorf("no alert %s", a)
		}
	}
}

// renderAnnotation renders an alert annotation as Prometheus does (a Go
// text/template with $labels, $externalLabels and $value), for an alert of
// the default servers (authority ""), and fails the test if it does not
// parse or run.
func renderAnnotation(t *testing.T, where, text string) string {
	t.Helper()
	str := func(v any) string { return fmt.Sprint(v) }
	funcs := template.FuncMap{"humanize": str, "humanizePercentage": str, "humanizeDuration": str, "printf": fmt.Sprintf}
	header := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}"
	tmpl, err := template.New(where).Funcs(funcs).Option("missingkey=zero").Parse(header + text)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return ""
	}
	var b strings.Builder
	data := map[string]any{
		"Labels": map[string]string{"authority": "", "namespace": "ns", "pod": "p", "server": "cp:18000",
			"type_url": "t", "scope": "shared", "reason": "node", "protocol": "sotw", "result": "halted"},
		"ExternalLabels": map[string]string{},
		"Value":          1.0,
	}
	if err := tmpl.Execute(&b, data); err != nil {
		t.Errorf("%s: %v", where, err)
	}
	return b.String()
}
