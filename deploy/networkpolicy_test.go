package deploy_test

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// TestNetworkPolicy checks the base's NetworkPolicy against the Deployment:
// it selects the relay's pods and admits ingress to the container's xds
// port from every namespace of the cluster and to its probe port from
// anywhere (the kubelet, Prometheus), and to nothing else: not the admin
// port, which listens on loopback. Egress stays open.
func TestNetworkPolicy(t *testing.T) {
	b := loadBase(t)
	np := b.netpol.Spec
	c := b.container(t)
	xds, probe := containerPort(t, c, "xds"), containerPort(t, c, "probe")

	if !maps.Equal(np.PodSelector.MatchLabels, b.deploy.Spec.Selector.MatchLabels) || len(np.PodSelector.MatchExpressions) != 0 {
		t.Errorf("podSelector %+v, want the Deployment's selector %v", np.PodSelector, b.deploy.Spec.Selector.MatchLabels)
	}
	if !slices.Equal(np.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Egress) != 0 {
		t.Errorf("policyTypes %v, egress %+v: want ingress rules only", np.PolicyTypes, np.Egress)
	}
	// Every port a rule admits, with who may reach it.
	admitted := map[int32]string{}
	for i, r := range np.Ingress {
		from := "anywhere"
		if len(r.From) > 0 {
			from = "selected peers"
			if len(r.From) == 1 && r.From[0].NamespaceSelector != nil && r.From[0].PodSelector == nil && r.From[0].IPBlock == nil &&
				len(r.From[0].NamespaceSelector.MatchLabels) == 0 && len(r.From[0].NamespaceSelector.MatchExpressions) == 0 {
				from = "the cluster"
			}
		}
		if len(r.Ports) == 0 {
			t.Errorf("ingress rule %d admits every port", i)
		}
		for _, p := range r.Ports {
			if p.Port == nil || p.Port.IntValue() == 0 || p.EndPort != nil || p.Protocol == nil || *p.Protocol != corev1.ProtocolTCP {
				t.Errorf("ingress rule %d port %+v: want one TCP port by number", i, p)
				continue
			}
			admitted[int32(p.Port.IntValue())] = from
		}
	}
	want := map[int32]string{xds: "the cluster", probe: "anywhere"}
	if !maps.Equal(admitted, want) {
		t.Errorf("ingress admits %v, want the xds port %d from the cluster and the probe port %d from anywhere", admitted, xds, probe)
	}
	if cfg := b.relayConfig(t); cfg.Admin != "" {
		if p := addrPort(t, "admin", cfg.Admin); admitted[p] != "" {
			t.Errorf("ingress admits the admin port %d", p)
		}
	}
}
