package deploy_test

import (
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/xds-relay/xds-relay/rest"
)

// restPort is the port of the relay's rest.listen the REST bootstrap uses.
const restPort = 18080

// TestEnvoyRESTBootstrap decodes the REST-JSON bootstrap strictly, validates
// it, and checks that LDS and CDS poll the relay's REST listener with a
// request timeout longer than the relay's default poll timeout (a held poll
// must not time out on the Envoy side first).
func TestEnvoyRESTBootstrap(t *testing.T) {
	b := loadBase(t)
	js, err := yaml.YAMLToJSON(read(t, "bootstraps/envoy-rest.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		t.Fatalf("protojson: %v", err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	validateAnys(t, bs.ProtoReflect())
	if bs.GetNode().GetId() == "" || bs.GetNode().GetCluster() == "" {
		t.Errorf("node %v: want id and cluster", bs.GetNode())
	}
	static := map[string]bool{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if sa.GetAddress() != b.serviceHost() || sa.GetPortValue() != restPort {
			t.Errorf("cluster %s points at %s:%d, want %s:%d", c.GetName(), sa.GetAddress(), sa.GetPortValue(), b.serviceHost(), restPort)
		}
		static[c.GetName()] = true
	}
	for name, src := range map[string]*corev3.ConfigSource{
		"cds_config": bs.GetDynamicResources().GetCdsConfig(),
		"lds_config": bs.GetDynamicResources().GetLdsConfig(),
	} {
		api := src.GetApiConfigSource()
		if api.GetApiType() != corev3.ApiConfigSource_REST || api.GetTransportApiVersion() != corev3.ApiVersion_V3 ||
			src.GetResourceApiVersion() != corev3.ApiVersion_V3 {
			t.Errorf("%s = %v, want REST over V3", name, src)
		}
		if len(api.GetClusterNames()) != 1 || !static[api.GetClusterNames()[0]] {
			t.Errorf("%s.cluster_names = %v, want one static cluster", name, api.GetClusterNames())
		}
		if api.GetRequestTimeout().AsDuration() <= rest.DefaultPollTimeout {
			t.Errorf("%s.request_timeout %v must exceed the relay's poll timeout %v", name,
				api.GetRequestTimeout().AsDuration(), rest.DefaultPollTimeout)
		}
	}
}
