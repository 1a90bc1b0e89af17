package deploy_test

import (
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var updatePrometheusRule = flag.Bool("update-prometheusrule", false,
	"write deploy/prometheus-operator/prometheusrule.yaml from deploy/prometheus/alerts.yaml")

const prometheusRulePath = "prometheus-operator/prometheusrule.yaml"

// podMonitor is the part of the Prometheus operator's PodMonitor
// (monitoring.coreos.com/v1) the overlay uses; decoding strictly into it
// catches misspelt or misplaced keys.
type podMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval,omitempty"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// prometheusRule is the operator's PrometheusRule: its spec is a Prometheus
// rule file.
type prometheusRule struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       alertRules        `json:"spec"`
}

// prometheusRuleHeader precedes alerts.yaml's groups in prometheusrule.yaml.
const prometheusRuleHeader = `# GENERATED from deploy/prometheus/alerts.yaml: its groups as this
# PrometheusRule's spec. Do not edit: change alerts.yaml and run
#   go test ./deploy/ -run TestPrometheusRule -update-prometheusrule
# (go test ./deploy/ fails while the two differ). The alerts, their labels
# and runbooks: ../prometheus/alerts.yaml and docs/OPERATIONS.md.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: xds-relay
  labels:
    app.kubernetes.io/name: xds-relay
spec:
`

// generatePrometheusRule returns prometheusrule.yaml as it must be: the
// header, then alerts.yaml from its groups: key on, indented under spec:.
func generatePrometheusRule(t *testing.T, alerts string) string {
	t.Helper()
	i := strings.Index(alerts, "\ngroups:")
	if i < 0 {
		t.Fatal("alerts.yaml has no top-level groups:")
	}
	var b strings.Builder
	b.WriteString(prometheusRuleHeader)
	for _, l := range strings.SplitAfter(alerts[i+1:], "\n") {
		if strings.TrimSpace(l) != "" {
			b.WriteString("  ")
		}
		b.WriteString(l)
	}
	return b.String()
}

// TestPrometheusRule checks that the PrometheusRule holds exactly the groups
// of alerts.yaml (the file promtool lints and tests): the file is generated
// from it, and both decode strictly to equal groups.
func TestPrometheusRule(t *testing.T) {
	alerts := read(t, "prometheus/alerts.yaml")
	want := generatePrometheusRule(t, string(alerts))
	if *updatePrometheusRule {
		if err := os.WriteFile(prometheusRulePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := read(t, prometheusRulePath)
	if string(got) != want {
		t.Errorf("%s is not generated from prometheus/alerts.yaml: run go test ./deploy/ -run TestPrometheusRule -update-prometheusrule", prometheusRulePath)
	}
	var pr prometheusRule
	if err := yaml.UnmarshalStrict(got, &pr); err != nil {
		t.Fatalf("%s: %v", prometheusRulePath, err)
	}
	var rules alertRules
	if err := yaml.UnmarshalStrict(alerts, &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || pr.Metadata.Name == "" ||
		pr.Metadata.Labels["app.kubernetes.io/name"] != "xds-relay" {
		t.Errorf("%s: %s %s %+v", prometheusRulePath, pr.APIVersion, pr.Kind, pr.Metadata)
	}
	if len(rules.Groups) == 0 || !reflect.DeepEqual(pr.Spec.Groups, rules.Groups) {
		t.Errorf("%s: spec.groups differ from alerts.yaml's groups", prometheusRulePath)
	}
	// And as plain YAML, in case a field is one the structs above lack.
	var raw struct {
		Spec map[string]any `json:"spec"`
	}
	var rawAlerts map[string]any
	if yaml.Unmarshal(got, &raw) != nil || yaml.Unmarshal(alerts, &rawAlerts) != nil || !reflect.DeepEqual(raw.Spec, rawAlerts) {
		t.Errorf("%s: spec differs from alerts.yaml", prometheusRulePath)
	}
}

// TestPodMonitor checks the PodMonitor against the base: it selects the
// Deployment's pods and scrapes /metrics on the probe container port, the
// one the config's probe_listen serves.
func TestPodMonitor(t *testing.T) {
	b := loadBase(t)
	var pm podMonitor
	if err := yaml.UnmarshalStrict(read(t, "prometheus-operator/podmonitor.yaml"), &pm); err != nil {
		t.Fatalf("podmonitor.yaml: %v", err)
	}
	if pm.APIVersion != "monitoring.coreos.com/v1" || pm.Kind != "PodMonitor" || pm.Metadata.Labels["app.kubernetes.io/name"] != "xds-relay" {
		t.Errorf("podmonitor.yaml: %s %s %+v", pm.APIVersion, pm.Kind, pm.Metadata)
	}
	if !reflect.DeepEqual(pm.Spec.Selector.MatchLabels, b.deploy.Spec.Selector.MatchLabels) || len(pm.Spec.Selector.MatchExpressions) != 0 {
		t.Errorf("PodMonitor selector %+v, want the Deployment's %v", pm.Spec.Selector, b.deploy.Spec.Selector.MatchLabels)
	}
	c := b.container(t)
	probe := containerPort(t, c, "probe")
	if got := addrPort(t, "probe_listen", b.relayConfig(t).ProbeListen); got != probe {
		t.Errorf("config probe_listen port %d, container port probe %d", got, probe)
	}
	if e := pm.Spec.PodMetricsEndpoints; len(e) != 1 || e[0].Port != "probe" || e[0].Path != "/metrics" {
		t.Errorf("PodMonitor endpoints %+v, want /metrics on port probe", e)
	}
}

// TestPrometheusOperatorOverlay checks the overlay's kustomization: the base
// and both objects, and no file it does not list.
func TestPrometheusOperatorOverlay(t *testing.T) {
	var k kustomization
	if err := yaml.UnmarshalStrict(read(t, "prometheus-operator/kustomization.yaml"), &k); err != nil {
		t.Fatalf("prometheus-operator/kustomization.yaml: %v", err)
	}
	want := []string{"../kubernetes", "podmonitor.yaml", "prometheusrule.yaml"}
	if !reflect.DeepEqual(k.Resources, want) || k.Namespace != "xds-relay" {
		t.Errorf("resources %q namespace %q, want %q in xds-relay", k.Resources, k.Namespace, want)
	}
	if got := glob(t, "prometheus-operator/*.yaml"); len(got) != 3 {
		t.Errorf("prometheus-operator holds %q: list every file in kustomization.yaml", got)
	}
}
