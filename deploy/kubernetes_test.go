package deploy_test

import (
	"bytes"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"sigs.k8s.io/yaml"

	"github.com/xds-relay/xds-relay/config"
)

// configPath is where the Deployment mounts the ConfigMap's config.yaml and
// where the image's CMD reads it.
const configPath = "/etc/xds-relay/config.yaml"

// drainGraceSeconds is how long after shutdown.drain_window cmd/xds-relay
// may take to exit after SIGTERM (docs/INTERFACE.md: the window plus 2 s).
const drainGraceSeconds = 2

// kustomization is the part of kustomize's Kustomization the base uses;
// decoding strictly into it catches misspelt keys.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors,omitempty"`
		IncludeTemplates bool              `json:"includeTemplates,omitempty"`
	} `json:"labels"`
	Resources          []string `json:"resources"`
	ConfigMapGenerator []struct {
		Name    string   `json:"name"`
		Files   []string `json:"files"`
		Options struct {
			Labels map[string]string `json:"labels,omitempty"`
		} `json:"options"`
	} `json:"configMapGenerator"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images"`
}

// base is the decoded kustomize base.
type base struct {
	kust   kustomization
	ns     *corev1.Namespace
	sa     *corev1.ServiceAccount
	cm     *corev1.ConfigMap
	deploy *appsv1.Deployment
	svc    *corev1.Service
	pdb    *policyv1.PodDisruptionBudget
	hpa    *autoscalingv2.HorizontalPodAutoscaler
	pc     *schedulingv1.PriorityClass
	netpol *networkingv1.NetworkPolicy
}

// loadBase decodes kustomization.yaml and every manifest it lists, each
// strictly (unknown or duplicate fields are errors) into its Kubernetes API
// type, chosen by apiVersion and kind.
func loadBase(t *testing.T) *base {
	t.Helper()
	b := &base{}
	if err := yaml.UnmarshalStrict(read(t, "kubernetes/kustomization.yaml"), &b.kust); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if b.kust.APIVersion != "kustomize.config.k8s.io/v1beta1" || b.kust.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml: %s %s", b.kust.APIVersion, b.kust.Kind)
	}
	listed := map[string]bool{}
	b.cm = generatedConfigMap(t, b.kust, listed)
	for _, res := range b.kust.Resources {
		listed[res] = true
		path := filepath.Join("kubernetes", res)
		data := read(t, path)
		if bytes.Contains(data, []byte("\n---")) {
			t.Errorf("%s: one object per file", path)
		}
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(data, &tm); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Namespace":
			b.ns = &corev1.Namespace{}
			obj = b.ns
		case "v1 ServiceAccount":
			b.sa = &corev1.ServiceAccount{}
			obj = b.sa
		case "apps/v1 Deployment":
			b.deploy = &appsv1.Deployment{}
			obj = b.deploy
		case "v1 Service":
			b.svc = &corev1.Service{}
			obj = b.svc
		case "policy/v1 PodDisruptionBudget":
			b.pdb = &policyv1.PodDisruptionBudget{}
			obj = b.pdb
		case "autoscaling/v2 HorizontalPodAutoscaler":
			b.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
			obj = b.hpa
		case "scheduling.k8s.io/v1 PriorityClass":
			b.pc = &schedulingv1.PriorityClass{}
			obj = b.pc
		case "networking.k8s.io/v1 NetworkPolicy":
			b.netpol = &networkingv1.NetworkPolicy{}
			obj = b.netpol
		default:
			t.Fatalf("%s: unexpected object %s %s", path, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(data, obj); err != nil {
			t.Fatalf("%s: strict decode into %T: %v", path, obj, err)
		}
	}
	for _, f := range glob(t, "kubernetes/*.yaml") {
		if name := filepath.Base(f); name != "kustomization.yaml" && !listed[name] {
			t.Errorf("%s is not listed in kustomization.yaml resources or generator files", f)
		}
	}
	if b.ns == nil || b.sa == nil || b.cm == nil || b.deploy == nil || b.svc == nil || b.pdb == nil || b.hpa == nil || b.pc == nil || b.netpol == nil {
		t.Fatalf("the base lacks an object: %+v", b)
	}
	return b
}

// generatedConfigMap is the ConfigMap of the base's one configMapGenerator
// as kustomize makes it, but under the generator's name (kustomize adds a
// hash of the data: make check-manifests checks the rendered output, with
// XDS_RELAY_KUSTOMIZE set, in rendered_test.go). It marks the generator's
// files listed.
func generatedConfigMap(t *testing.T, k kustomization, listed map[string]bool) *corev1.ConfigMap {
	t.Helper()
	if len(k.ConfigMapGenerator) != 1 {
		t.Fatalf("kustomization.yaml: %d configMapGenerators, want the relay's config only", len(k.ConfigMapGenerator))
	}
	g := k.ConfigMapGenerator[0]
	cm := &corev1.ConfigMap{Data: map[string]string{}}
	cm.Name, cm.Labels = g.Name, g.Options.Labels
	for _, f := range g.Files {
		// KEY=FILE or FILE (the key is the file's base name).
		key, file, ok := strings.Cut(f, "=")
		if !ok {
			key, file = filepath.Base(f), f
		}
		listed[file] = true
		cm.Data[key] = string(read(t, filepath.Join("kubernetes", file)))
	}
	return cm
}

// relayConfig parses and validates the ConfigMap's config.yaml.
func (b *base) relayConfig(t *testing.T) *config.Config {
	t.Helper()
	data, ok := b.cm.Data[filepath.Base(configPath)]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s", b.cm.Name, filepath.Base(configPath))
	}
	cfg, err := config.Parse([]byte(data))
	if err != nil {
		t.Fatalf("ConfigMap config: %v", err)
	}
	// Validate checks that persist_path's directory exists: it is the pod's
	// volume (TestDeploymentWiring), not a directory of this machine.
	check := *cfg
	if p := cfg.Cache.PersistPath; p != "" {
		if !filepath.IsAbs(p) {
			t.Errorf("ConfigMap config: cache.persist_path %q is not absolute", p)
		}
		check.Cache.PersistPath = filepath.Join(t.TempDir(), filepath.Base(p))
	}
	if err := check.Validate(); err != nil {
		t.Fatalf("ConfigMap config: %v", err)
	}
	return cfg
}

func TestKubernetesManifestsDecodeStrictly(t *testing.T) {
	b := loadBase(t)
	if b.ns.Name != b.kust.Namespace {
		t.Errorf("Namespace %q, kustomization namespace %q", b.ns.Name, b.kust.Namespace)
	}
	for _, m := range []struct {
		kind   string
		name   string
		labels map[string]string
	}{
		{"Namespace", b.ns.Name, b.ns.Labels},
		{"ServiceAccount", b.sa.Name, b.sa.Labels},
		{"ConfigMap", b.cm.Name, b.cm.Labels},
		{"Deployment", b.deploy.Name, b.deploy.Labels},
		{"Service", b.svc.Name, b.svc.Labels},
		{"PodDisruptionBudget", b.pdb.Name, b.pdb.Labels},
		{"HorizontalPodAutoscaler", b.hpa.Name, b.hpa.Labels},
		{"PriorityClass", b.pc.Name, b.pc.Labels},
		{"NetworkPolicy", b.netpol.Name, b.netpol.Labels},
	} {
		if m.name == "" || m.labels["app.kubernetes.io/name"] != "xds-relay" {
			t.Errorf("%s %q: want a name and the label app.kubernetes.io/name=xds-relay", m.kind, m.name)
		}
	}
}

func TestConfigMapConfigIsValid(t *testing.T) {
	b := loadBase(t)
	cfg := b.relayConfig(t)
	if len(cfg.Upstream.XDSServers) == 0 {
		t.Error("ConfigMap config has no upstream server")
	}
}

// container returns the Deployment's only container.
func (b *base) container(t *testing.T) corev1.Container {
	t.Helper()
	cs := b.deploy.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("Deployment has %d containers, want 1", len(cs))
	}
	return cs[0]
}

func containerPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

func addrPort(t *testing.T, field, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("config %s %q: not host:port", field, addr)
	}
	return int32(n)
}

// TestDeploymentWiring checks that the objects fit together: selectors,
// ports (container, Service, probes, config), probes and the scrape on the
// probe port while the admin API stays on loopback, the
// drain sequence, the security context and the config mount.
func TestDeploymentWiring(t *testing.T) {
	b := loadBase(t)
	cfg := b.relayConfig(t)
	d := b.deploy
	pod := d.Spec.Template
	c := b.container(t)

	labels := pod.Labels
	matches := func(what string, sel map[string]string) {
		t.Helper()
		if len(sel) == 0 {
			t.Errorf("%s: empty selector", what)
		}
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s selects %s=%s; the pod template has %q", what, k, v, labels[k])
			}
		}
	}
	matches("Deployment", d.Spec.Selector.MatchLabels)
	matches("Service", b.svc.Spec.Selector)
	matches("PodDisruptionBudget", b.pdb.Spec.Selector.MatchLabels)
	if ref := b.hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
		t.Errorf("HPA targets %+v, want Deployment %s", ref, d.Name)
	}
	if d.Spec.Replicas != nil {
		t.Errorf("Deployment sets replicas: %d; the HPA owns the count, and an apply would reset it", *d.Spec.Replicas)
	}
	if b.hpa.Spec.MinReplicas == nil || *b.hpa.Spec.MinReplicas < 2 || b.hpa.Spec.MaxReplicas < *b.hpa.Spec.MinReplicas {
		t.Errorf("HPA replicas %v..%d, want at least 2", b.hpa.Spec.MinReplicas, b.hpa.Spec.MaxReplicas)
	}
	if b.pdb.Spec.MaxUnavailable == nil && b.pdb.Spec.MinAvailable == nil {
		t.Error("PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}

	// Ports: config ↔ container ↔ Service ↔ probes ↔ scrape annotation.
	xds, probePort := containerPort(t, c, "xds"), containerPort(t, c, "probe")
	if got := addrPort(t, "listen", cfg.Listen); got != xds {
		t.Errorf("config listen port %d, container port xds %d", got, xds)
	}
	if got := addrPort(t, "probe_listen", cfg.ProbeListen); got != probePort {
		t.Errorf("config probe_listen port %d, container port probe %d", got, probePort)
	}
	if host, _, _ := net.SplitHostPort(cfg.ProbeListen); host == "127.0.0.1" || host == "localhost" {
		t.Errorf("config probe_listen %q listens on loopback: the kubelet cannot probe it", cfg.ProbeListen)
	}
	// The admin API (drain, debug views, pprof, log level) is not on the pod IP.
	if host, _, _ := net.SplitHostPort(cfg.Admin); cfg.Admin != "" && host != "127.0.0.1" && host != "localhost" {
		t.Errorf("config admin %q listens beyond loopback: any pod could drain the relay", cfg.Admin)
	}
	for _, p := range c.Ports {
		if cfg.Admin != "" && p.ContainerPort == addrPort(t, "admin", cfg.Admin) {
			t.Errorf("container port %s exposes the admin port %d", p.Name, p.ContainerPort)
		}
	}
	if len(b.svc.Spec.Ports) != 1 {
		t.Fatalf("Service ports = %+v, want the xDS port only", b.svc.Spec.Ports)
	}
	sp := b.svc.Spec.Ports[0]
	if sp.Port != 18001 || sp.TargetPort.String() != "xds" || xds != 18001 {
		t.Errorf("Service port %d → %s, container xds %d; want 18001 → xds (18001)", sp.Port, sp.TargetPort.String(), xds)
	}
	probe := func(what string, p *corev1.Probe, path string) {
		t.Helper()
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "probe" {
			t.Errorf("%s probe = %+v, want GET %s on port probe", what, p, path)
		}
	}
	probe("readiness", c.ReadinessProbe, "/readyz")
	probe("liveness", c.LivenessProbe, "/healthz")
	if got := pod.Annotations["prometheus.io/port"]; got != strconv.Itoa(int(probePort)) {
		t.Errorf("prometheus.io/port = %q, want the probe port %d", got, probePort)
	}

	// Drain: preStop sleep, then SIGTERM drains within the window + 2 s.
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds <= 0 {
		t.Fatalf("preStop = %+v, want a sleep action (the image has no shell)", c.Lifecycle)
	}
	grace := pod.Spec.TerminationGracePeriodSeconds
	drain := int64(cfg.Shutdown.DrainWindow.Seconds()+0.999) + drainGraceSeconds
	if need := c.Lifecycle.PreStop.Sleep.Seconds + drain; grace == nil || *grace <= need {
		t.Errorf("terminationGracePeriodSeconds = %v, want more than preStop + drain = %d", grace, need)
	}

	// Warm restart: persist_path is on a writable volume of the pod.
	if cfg.Cache.PersistPath == "" {
		t.Error("the ConfigMap config sets no cache.persist_path")
	}
	persisted := false
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != filepath.Dir(cfg.Cache.PersistPath) || vm.ReadOnly {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			persisted = persisted || (v.Name == vm.Name && (v.EmptyDir != nil || v.PersistentVolumeClaim != nil))
		}
	}
	if !persisted {
		t.Errorf("cache.persist_path %q is not on a writable volume mounted at its directory", cfg.Cache.PersistPath)
	}
	// OPERATIONS.md "Warm restart", sizing: a write needs twice the files,
	// which hold the cache the memory holds beside the clients; an emptyDir
	// past its sizeLimit gets the pod evicted.
	for _, v := range pod.Spec.Volumes {
		if e := v.EmptyDir; e != nil && v.Name != "config" {
			if mem := c.Resources.Limits.Memory(); e.SizeLimit == nil || e.SizeLimit.Cmp(*mem) < 0 {
				t.Errorf("emptyDir %s: sizeLimit %v, want at least the memory limit %v", v.Name, e.SizeLimit, mem)
			}
		}
	}
	if s := d.Spec.Strategy.RollingUpdate; s == nil || s.MaxUnavailable == nil || s.MaxUnavailable.IntValue() != 0 {
		t.Errorf("rolling update %+v, want maxUnavailable 0", s)
	}

	// Resources and security.
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources = %+v, want cpu and memory requests and a memory limit", c.Resources)
	}
	psc, sc := pod.Spec.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532:
		t.Errorf("pod securityContext %+v, want runAsNonRoot as uid 65532 (distroless nonroot)", psc)
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("pod seccompProfile %+v, want RuntimeDefault", psc.SeccompProfile)
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("container securityContext %+v, want readOnlyRootFilesystem", sc)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("container securityContext: want allowPrivilegeEscalation false")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Errorf("container capabilities %+v, want drop ALL", sc.Capabilities)
	}
	if pod.Spec.ServiceAccountName != b.sa.Name {
		t.Errorf("serviceAccountName %q, want %q", pod.Spec.ServiceAccountName, b.sa.Name)
	}

	// Config: the ConfigMap mounted where --config points.
	if !slices.Contains(c.Args, "--config="+configPath) {
		t.Errorf("args %q lack --config=%s", c.Args, configPath)
	}
	mounted := false
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != filepath.Dir(configPath) {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil && v.ConfigMap.Name == b.cm.Name && vm.ReadOnly {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("ConfigMap %s is not mounted read-only at %s", b.cm.Name, filepath.Dir(configPath))
	}

	// The image name is the one kustomize rewrites.
	names := []string{}
	for _, im := range b.kust.Images {
		names = append(names, im.Name)
	}
	if !slices.Contains(names, c.Image) {
		t.Errorf("container image %q is not rewritten by kustomization images %q", c.Image, names)
	}
	for _, im := range b.kust.Images {
		if im.Digest == "" && (im.NewTag == "" || im.NewTag == "latest") {
			t.Errorf("kustomization image %s: tag %q; want a fixed release or a digest, never latest", im.Name, im.NewTag)
		}
	}
}

// Each replica presents its own node id upstream: the pod's name, from the
// downward API, through --node-id (the config file is the same for all, and
// the relay expands no variables in it).
func TestNodeIDPerPod(t *testing.T) {
	b := loadBase(t)
	c := b.container(t)
	if !slices.Contains(c.Args, "--node-id=$(POD_NAME)") {
		t.Errorf("args %q lack --node-id=$(POD_NAME)", c.Args)
	}
	fromName := false
	for _, e := range c.Env {
		if e.Name == "POD_NAME" {
			fromName = e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
		}
	}
	if !fromName {
		t.Errorf("env %+v: want POD_NAME from the downward API's metadata.name", c.Env)
	}
	if id := b.relayConfig(t).Node.ID; strings.Contains(id, "$") {
		t.Errorf("config node.id %q holds a variable: the relay takes it literally", id)
	}
}

// The relays' own Service is the last upstream fallback: a new replica
// warms from a ready sibling while the control plane is down.
func TestSiblingFallback(t *testing.T) {
	b := loadBase(t)
	servers := b.relayConfig(t).Upstream.XDSServers
	want := fmt.Sprintf("%s:%d", b.serviceHost(), b.svc.Spec.Ports[0].Port)
	if len(servers) < 2 || servers[len(servers)-1].ServerURI != want {
		t.Errorf("xds_servers %+v, want the control plane first and %s last", servers, want)
	}
}

// serviceHost is the Service's in-cluster DNS name.
func (b *base) serviceHost() string {
	return fmt.Sprintf("%s.%s.svc.cluster.local", b.svc.Name, b.kust.Namespace)
}

// authorities returns the ConfigMap config's authorities.
func (b *base) authorities(t *testing.T) []string {
	t.Helper()
	var out []string
	for a := range b.relayConfig(t).Upstream.Authorities {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}
