package deploy_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// leaf is the leaf relay docs/SCALING.md sizes: its cores, memory limit,
// clients and memory per client, read from the page.
type leaf struct {
	cores        int64
	memoryLimit  int64 // bytes
	clients      int64
	perClientKiB int64 // the upper end of the measured range
}

func scalingLeaf(t *testing.T) leaf {
	t.Helper()
	doc := string(read(t, "../docs/SCALING.md"))
	m := regexp.MustCompile(`\*\*(\d+)-core pods with a (\d+) GiB memory limit\*\*, each holding \*\*([\d,]+) clients\*\*`).
		FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("SCALING.md no longer states the leaf as **N-core pods with a N GiB memory limit**, each holding **N clients**")
	}
	pc := regexp.MustCompile(`memory per connected client[^|]*\| (\d+)–(\d+) KiB RSS`).FindStringSubmatch(doc)
	if pc == nil {
		t.Fatal("SCALING.md no longer states the memory per connected client as N–N KiB RSS")
	}
	atoi := func(s string) int64 {
		n, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return leaf{cores: atoi(m[1]), memoryLimit: atoi(m[2]) << 30, clients: atoi(m[3]), perClientKiB: atoi(pc[2])}
}

// goMemLimit parses a GOMEMLIMIT value as the Go runtime does: a number of
// bytes with an optional B, KiB, MiB, GiB or TiB suffix.
func goMemLimit(t *testing.T, v string) int64 {
	t.Helper()
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			x, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("GOMEMLIMIT %q: %v", v, err)
			}
			return x << u.shift
		}
	}
	x, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("GOMEMLIMIT %q: %v", v, err)
	}
	return x
}

// The base is one leaf of docs/SCALING.md: its cores and memory as requests
// equal to limits (Guaranteed QoS), GOMEMLIMIT at about 90 % of the memory
// limit with room for the leaf's clients, and an HPA target that is a real
// share of those cores, not noise.
func TestSizingMatchesScaling(t *testing.T) {
	want := scalingLeaf(t)
	b := loadBase(t)
	c := b.container(t)
	req, lim := c.Resources.Requests, c.Resources.Limits

	cores := resource.NewQuantity(want.cores, resource.DecimalSI)
	mem := resource.NewQuantity(want.memoryLimit, resource.BinarySI)
	for _, q := range []struct {
		what      string
		got, want *resource.Quantity
	}{
		{"cpu request", req.Cpu(), cores}, {"cpu limit", lim.Cpu(), cores},
		{"memory request", req.Memory(), mem}, {"memory limit", lim.Memory(), mem},
	} {
		if q.got.Cmp(*q.want) != 0 {
			t.Errorf("%s = %s, want %s (SCALING.md's leaf)", q.what, q.got, q.want)
		}
	}
	// Guaranteed: every resource's request equals its limit.
	for name, l := range lim {
		if r, ok := req[name]; !ok || r.Cmp(l) != 0 {
			t.Errorf("%s: request %v, limit %s; want them equal (Guaranteed QoS)", name, req[name], l.String())
		}
	}
	for name := range req {
		if _, ok := lim[name]; !ok {
			t.Errorf("%s: a request without a limit; want them equal (Guaranteed QoS)", name)
		}
	}

	var memLimit int64
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			if e.ValueFrom != nil {
				t.Fatalf("GOMEMLIMIT from %+v: the downward API gives 100 %% of the limit, want ~90 %%", e.ValueFrom)
			}
			memLimit = goMemLimit(t, e.Value)
		}
	}
	if ratio := float64(memLimit) / float64(lim.Memory().Value()); ratio < 0.88 || ratio > 0.92 {
		t.Errorf("GOMEMLIMIT = %d bytes, %.1f %% of the memory limit %s; want ~90 %%", memLimit, 100*ratio, lim.Memory())
	}
	if clients := want.clients * want.perClientKiB << 10; clients > memLimit*3/4 {
		t.Errorf("%d clients at %d KiB (%d MiB) leave less than a quarter of GOMEMLIMIT (%d MiB) for the cache and the collector",
			want.clients, want.perClientKiB, clients>>20, memLimit>>20)
	}

	// The HPA scales on a share of the request: at least one core.
	var target int32
	for _, m := range b.hpa.Spec.Metrics {
		if m.Resource != nil && m.Resource.Name == corev1.ResourceCPU && m.Resource.Target.AverageUtilization != nil {
			target = *m.Resource.Target.AverageUtilization
		}
	}
	if milli := int64(target) * req.Cpu().MilliValue() / 100; target == 0 || target > 90 || milli < 1000 {
		t.Errorf("HPA CPU target %d %% of %s = %dm; want a utilization target of at most 90 %% that is at least one core",
			target, req.Cpu(), milli)
	}
}

// The relays have a priority above ordinary pods and below the system
// classes, never the cluster's default, and the Deployment uses it.
func TestPriorityClass(t *testing.T) {
	b := loadBase(t)
	if got := b.deploy.Spec.Template.Spec.PriorityClassName; got != b.pc.Name {
		t.Errorf("priorityClassName = %q, want %q (priorityclass.yaml)", got, b.pc.Name)
	}
	if b.pc.Value <= 0 || b.pc.Value >= 1_000_000_000 {
		t.Errorf("PriorityClass value %d, want above 0 and below the system classes' 1e9", b.pc.Value)
	}
	if b.pc.GlobalDefault {
		t.Error("PriorityClass is the cluster's default")
	}
	if b.pc.Namespace != "" {
		t.Errorf("PriorityClass has namespace %q; it is cluster-scoped", b.pc.Namespace)
	}
}

// No two replicas on one node while another has fewer; zones preferred.
// Both constraints count one revision's pods and honour taints.
func TestTopologySpread(t *testing.T) {
	b := loadBase(t)
	pod := b.deploy.Spec.Template
	want := map[string]corev1.UnsatisfiableConstraintAction{
		"kubernetes.io/hostname":      corev1.DoNotSchedule,
		"topology.kubernetes.io/zone": corev1.ScheduleAnyway,
	}
	for _, c := range pod.Spec.TopologySpreadConstraints {
		action, ok := want[c.TopologyKey]
		if !ok {
			t.Errorf("unexpected spread over %s", c.TopologyKey)
			continue
		}
		delete(want, c.TopologyKey)
		if c.WhenUnsatisfiable != action || c.MaxSkew != 1 {
			t.Errorf("spread over %s: %s with maxSkew %d, want %s with 1", c.TopologyKey, c.WhenUnsatisfiable, c.MaxSkew, action)
		}
		if c.LabelSelector == nil || c.LabelSelector.MatchLabels["app.kubernetes.io/name"] != pod.Labels["app.kubernetes.io/name"] {
			t.Errorf("spread over %s selects %+v, not the relay's pods", c.TopologyKey, c.LabelSelector)
		}
		if len(c.MatchLabelKeys) != 1 || c.MatchLabelKeys[0] != "pod-template-hash" {
			t.Errorf("spread over %s: matchLabelKeys %q, want [pod-template-hash] (a rolling update's surge pod)", c.TopologyKey, c.MatchLabelKeys)
		}
		if c.NodeTaintsPolicy == nil || *c.NodeTaintsPolicy != corev1.NodeInclusionPolicyHonor {
			t.Errorf("spread over %s: nodeTaintsPolicy %v, want Honor (tainted nodes without relays)", c.TopologyKey, c.NodeTaintsPolicy)
		}
	}
	for key := range want {
		t.Errorf("no spread over %s", key)
	}
}
