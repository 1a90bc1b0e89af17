package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"sigs.k8s.io/yaml"
)

// The tests of this file check what the pinned tools render; make
// check-manifests runs them with the tools' paths in these variables.
// Without them (go test ./deploy/ on a machine without the tools) they are
// skipped: the other tests check the sources.
const (
	kustomizeEnv = "XDS_RELAY_KUSTOMIZE"
	helmEnv      = "XDS_RELAY_HELM"
)

// tool returns the path of the tool named by env, skipping the test when it
// is unset.
func tool(t *testing.T, env string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		t.Skipf("%s is unset: make check-manifests runs this test with the pinned tool", env)
	}
	return p
}

// run runs a tool and returns its standard output.
func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// kustomizeBuild renders the kustomization in dir with the pinned kustomize.
func kustomizeBuild(t *testing.T, dir string) []rendered {
	t.Helper()
	return decodeRendered(t, "kustomize build "+dir, run(t, tool(t, kustomizeEnv), "build", dir))
}

// rendered is one object of a rendered stream, decoded strictly into its
// API type.
type rendered struct {
	APIVersion string
	Kind       string
	Name       string
	Namespace  string
	Labels     map[string]string
	Obj        any
}

// key names the object as kubectl does: kind/name.
func (r rendered) key() string { return r.Kind + "/" + r.Name }

// newObject returns an empty object of the API type for apiVersion and
// kind, or nil for one the manifests do not use.
func newObject(apiVersion, kind string) any {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return &corev1.Namespace{}
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}
	case "v1 Service":
		return &corev1.Service{}
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "scheduling.k8s.io/v1 PriorityClass":
		return &schedulingv1.PriorityClass{}
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "monitoring.coreos.com/v1 PodMonitor":
		return &podMonitor{}
	case "monitoring.coreos.com/v1 PrometheusRule":
		return &prometheusRule{}
	}
	return nil
}

// decodeRendered splits a multi-document YAML stream and decodes each
// object strictly into its type.
func decodeRendered(t *testing.T, what string, data []byte) []rendered {
	t.Helper()
	var out []rendered
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string            `json:"name"`
				Namespace string            `json:"namespace"`
				Labels    map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, doc)
		}
		obj := newObject(meta.APIVersion, meta.Kind)
		if obj == nil {
			t.Fatalf("%s: unexpected object %s %s %s", what, meta.APIVersion, meta.Kind, meta.Metadata.Name)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s: %s %s: strict decode into %T: %v", what, meta.Kind, meta.Metadata.Name, obj, err)
		}
		out = append(out, rendered{meta.APIVersion, meta.Kind, meta.Metadata.Name, meta.Metadata.Namespace, meta.Metadata.Labels, obj})
	}
	if len(out) == 0 {
		t.Fatalf("%s rendered nothing", what)
	}
	return out
}

// stripComments drops whole-line YAML comments.
func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// find returns the only rendered object of kind, failing the test when
// there is none or more than one.
func find(t *testing.T, objs []rendered, kind string) rendered {
	t.Helper()
	var found []rendered
	for _, o := range objs {
		if o.Kind == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s rendered, want 1", len(found), kind)
	}
	return found[0]
}

// hashedConfigMap matches the name kustomize gives the generated ConfigMap.
var hashedConfigMap = regexp.MustCompile(`^xds-relay-config-[a-z0-9]{10}$`)

// TestRenderedBase checks kustomize's output of the base: every object
// decodes strictly, is namespaced in xds-relay (but for the cluster-scoped
// ones), and the Deployment mounts the generated ConfigMap by its hashed
// name, whose config.yaml is deploy/kubernetes/config.yaml: a changed config
// is a new ConfigMap name, so a new pod template, so a rollout.
func TestRenderedBase(t *testing.T) {
	objs := kustomizeBuild(t, "kubernetes")
	for _, o := range objs {
		clusterScoped := o.Kind == "Namespace" || o.Kind == "PriorityClass"
		if (o.Namespace == "xds-relay") == clusterScoped {
			t.Errorf("%s: namespace %q", o.key(), o.Namespace)
		}
		if o.Labels["app.kubernetes.io/part-of"] != "xds-relay" {
			t.Errorf("%s: labels %v lack app.kubernetes.io/part-of=xds-relay", o.key(), o.Labels)
		}
	}
	cm := find(t, objs, "ConfigMap").Obj.(*corev1.ConfigMap)
	if !hashedConfigMap.MatchString(cm.Name) {
		t.Errorf("ConfigMap %q: want the generator's name with kustomize's hash suffix", cm.Name)
	}
	if got, want := cm.Data["config.yaml"], string(read(t, "kubernetes/config.yaml")); got != want {
		t.Errorf("ConfigMap %s config.yaml differs from deploy/kubernetes/config.yaml", cm.Name)
	}
	d := find(t, objs, "Deployment").Obj.(*appsv1.Deployment)
	mounted := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			if v.ConfigMap.Name != cm.Name {
				t.Errorf("Deployment volume %s mounts ConfigMap %q, want %q", v.Name, v.ConfigMap.Name, cm.Name)
			}
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("the Deployment mounts no ConfigMap")
	}

	// A changed config: another ConfigMap name, and the Deployment's pod
	// template names it (a rollout).
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("kubernetes")); err != nil {
		t.Fatal(err)
	}
	changed := append(read(t, "kubernetes/config.yaml"), "# changed\n"...)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), changed, 0o644); err != nil {
		t.Fatal(err)
	}
	objs = kustomizeBuild(t, dir)
	cm2 := find(t, objs, "ConfigMap").Obj.(*corev1.ConfigMap)
	d2 := find(t, objs, "Deployment").Obj.(*appsv1.Deployment)
	if cm2.Name == cm.Name || !hashedConfigMap.MatchString(cm2.Name) {
		t.Errorf("a changed config.yaml gives ConfigMap %q, the same config %q: want a new hashed name", cm2.Name, cm.Name)
	}
	for _, v := range d2.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name != cm2.Name {
			t.Errorf("after a config change the Deployment mounts ConfigMap %q, want %q", v.ConfigMap.Name, cm2.Name)
		}
	}
}

// TestRenderedPrometheusOperator checks kustomize's output of the
// prometheus-operator overlay: the base's objects and the PodMonitor and
// PrometheusRule, in the relays' namespace.
func TestRenderedPrometheusOperator(t *testing.T) {
	base := kustomizeBuild(t, "kubernetes")
	objs := kustomizeBuild(t, "prometheus-operator")
	keys := map[string]string{}
	for _, o := range objs {
		keys[o.key()] = o.Namespace
	}
	for _, o := range base {
		if ns, ok := keys[o.key()]; !ok || ns != o.Namespace {
			t.Errorf("the overlay lacks the base's %s (namespace %q)", o.key(), o.Namespace)
		}
	}
	for _, k := range []string{"PodMonitor/xds-relay", "PrometheusRule/xds-relay"} {
		if keys[k] != "xds-relay" {
			t.Errorf("%s: rendered in namespace %q, want xds-relay", k, keys[k])
		}
	}
	if len(objs) != len(base)+2 {
		t.Errorf("the overlay renders %d objects, the base %d: want the base and 2", len(objs), len(base))
	}
	rules := find(t, objs, "PrometheusRule").Obj.(*prometheusRule)
	var alerts alertRules
	if err := yaml.UnmarshalStrict(read(t, "prometheus/alerts.yaml"), &alerts); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rules.Spec.Groups, alerts.Groups) {
		t.Error("the rendered PrometheusRule's groups differ from alerts.yaml's")
	}
}
