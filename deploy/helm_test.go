package deploy_test

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/xds-relay/xds-relay/config"
)

const chartDir = "helm/xds-relay"

// helmOnlyLabels are the labels the chart adds to the base's.
var helmOnlyLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart"}

// helmTemplate renders the chart as release xds-relay in the namespace
// xds-relay, with args added.
func helmTemplate(t *testing.T, args ...string) []rendered {
	t.Helper()
	args = append([]string{"template", "xds-relay", chartDir, "--namespace", "xds-relay"}, args...)
	return decodeRendered(t, "helm "+strings.Join(args, " "), run(t, tool(t, helmEnv), args...))
}

// configOf returns the rendered ConfigMap's config.yaml, which must parse
// and validate as the relay's config.
func configOf(t *testing.T, objs []rendered) (string, *config.Config) {
	t.Helper()
	cm := find(t, objs, "ConfigMap").Obj.(*corev1.ConfigMap)
	data := cm.Data[filepath.Base(configPath)]
	cfg, err := config.Parse([]byte(data))
	if err != nil {
		t.Fatalf("ConfigMap %s: %v", cm.Name, err)
	}
	check := *cfg
	check.Cache.PersistPath = filepath.Join(t.TempDir(), filepath.Base(cfg.Cache.PersistPath))
	if err := check.Validate(); err != nil {
		t.Fatalf("ConfigMap %s: %v", cm.Name, err)
	}
	return data, cfg
}

// yamlDiff returns the difference between the data two YAML documents
// hold ("" when equal).
func yamlDiff(t *testing.T, a, b string) string {
	t.Helper()
	var x, y any
	if err := yaml.Unmarshal([]byte(a), &x); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(b), &y); err != nil {
		t.Fatal(err)
	}
	return cmp.Diff(x, y)
}

// TestHelmMatchesKustomize renders the chart with its default values (and
// createNamespace, as the base has a Namespace) and the kustomize base, and
// wants the same objects: the same kinds and names, and equal contents but
// for Helm's own labels, the config checksum annotation, the ConfigMap's
// name (kustomize's carries a hash; the chart rolls the pods by the
// checksum instead) and the config's comments.
func TestHelmMatchesKustomize(t *testing.T) {
	objs := helmTemplate(t, "--set", "createNamespace=true")
	base := kustomizeBuild(t, "kubernetes")

	helmCfg, _ := configOf(t, objs)
	baseCfg, _ := configOf(t, base)
	if diff := yamlDiff(t, baseCfg, helmCfg); diff != "" {
		t.Errorf("the chart's config.yaml differs from the base's (-kustomize +helm):\n%s", diff)
	}
	checksums := 0
	for _, o := range objs {
		m := o.Obj.(metav1.Object)
		labels := m.GetLabels()
		for _, k := range helmOnlyLabels {
			if labels[k] == "" {
				t.Errorf("helm %s: no label %s", o.key(), k)
			}
			delete(labels, k)
		}
		m.SetLabels(labels)
		switch obj := o.Obj.(type) {
		case *corev1.ConfigMap:
			obj.Data = nil
		case *appsv1.Deployment:
			if obj.Spec.Template.Annotations["checksum/config"] != "" {
				checksums++
			}
			delete(obj.Spec.Template.Annotations, "checksum/config")
		}
	}
	if checksums != 1 {
		t.Error("the chart's Deployment has no checksum/config annotation: a config change would not roll the pods")
	}
	for _, o := range base {
		switch obj := o.Obj.(type) {
		case *corev1.ConfigMap:
			obj.Data = nil
			obj.Name = "xds-relay-config"
		case *appsv1.Deployment:
			for i, v := range obj.Spec.Template.Spec.Volumes {
				if v.ConfigMap != nil {
					obj.Spec.Template.Spec.Volumes[i].ConfigMap.Name = "xds-relay-config"
				}
			}
		}
	}
	byKey := func(objs []rendered) map[string]any {
		out := map[string]any{}
		for _, o := range objs {
			if o.Kind == "ConfigMap" {
				o.Name = "xds-relay-config"
			}
			out[o.key()] = o.Obj
		}
		return out
	}
	h, k := byKey(objs), byKey(base)
	if hk, kk := slices.Sorted(maps.Keys(h)), slices.Sorted(maps.Keys(k)); !slices.Equal(hk, kk) {
		t.Fatalf("the chart renders %q, kustomize %q", hk, kk)
	}
	for key, want := range k {
		if diff := cmp.Diff(want, h[key]); diff != "" {
			t.Errorf("%s: the chart's differs from the base's (-kustomize +helm):\n%s", key, diff)
		}
	}
}

// TestHelmValues renders the chart with other values and checks that they
// land where they must: the upstream servers (the sibling fallback still
// last), the image by digest, the replica bounds, the resources with the
// cache volume's sizeLimit, and a new config checksum (a rollout).
func TestHelmValues(t *testing.T) {
	def := find(t, helmTemplate(t), "Deployment").Obj.(*appsv1.Deployment)
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	objs := helmTemplate(t,
		"--set-json", `upstreamServers=[{"server_uri":"cp.example.com:18000","channel_creds":[{"type":"insecure"}]},{"server_uri":"cp2.example.com:18000","channel_creds":[{"type":"insecure"}]}]`,
		"--set", "image.digest="+digest,
		"--set", "replicas.min=3", "--set", "replicas.max=30",
		"--set", "resources.requests.memory=2Gi", "--set", "resources.limits.memory=2Gi", "--set", "goMemLimit=1843MiB",
		"--set", "networkPolicy.enabled=false", "--set", "priorityClass.create=false")
	_, cfg := configOf(t, objs)
	var uris []string
	for _, s := range cfg.Upstream.XDSServers {
		uris = append(uris, s.ServerURI)
	}
	if want := []string{"cp.example.com:18000", "cp2.example.com:18000", "xds-relay.xds-relay.svc.cluster.local:18001"}; !slices.Equal(uris, want) {
		t.Errorf("xds_servers %q, want %q", uris, want)
	}
	d := find(t, objs, "Deployment").Obj.(*appsv1.Deployment)
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != "ghcr.io/xds-relay/xds-relay@"+digest {
		t.Errorf("image %q, want the digest", c.Image)
	}
	if m := c.Resources.Limits.Memory().String(); m != "2Gi" || c.Resources.Requests.Memory().String() != "2Gi" {
		t.Errorf("resources %+v, want 2Gi", c.Resources)
	}
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" && e.Value != "1843MiB" {
			t.Errorf("GOMEMLIMIT %q, want 1843MiB", e.Value)
		}
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.EmptyDir != nil && (v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.String() != "2Gi") {
			t.Errorf("emptyDir %s sizeLimit %v, want the memory limit 2Gi", v.Name, v.EmptyDir.SizeLimit)
		}
	}
	if a, b := def.Spec.Template.Annotations["checksum/config"], d.Spec.Template.Annotations["checksum/config"]; a == b {
		t.Errorf("checksum/config %q is the same for another config: the pods would not roll", a)
	}
	hpa := find(t, objs, "HorizontalPodAutoscaler").Obj.(*autoscalingv2.HorizontalPodAutoscaler)
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas != 3 || hpa.Spec.MaxReplicas != 30 {
		t.Errorf("HPA %v..%d, want 3..30", hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}
	for _, o := range objs {
		if o.Kind == "NetworkPolicy" || o.Kind == "PriorityClass" || o.Kind == "Namespace" {
			t.Errorf("%s rendered though disabled", o.key())
		}
	}
}
