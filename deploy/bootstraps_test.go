package deploy_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	// The extensions the Envoy bootstraps reference in Anys, so that
	// protojson resolves them.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"
)

// relayPort is the relay's xDS port every bootstrap points at.
const relayPort = 18001

// validator is the interface of protoc-gen-validate's generated code.
type validator interface{ ValidateAll() error }

// TestEnvoyBootstraps decodes each Envoy bootstrap (YAML → JSON → protojson,
// unknown fields rejected) into envoy's Bootstrap, runs the generated
// validation on it and on every message packed in an Any, and checks that
// its ADS stream goes to the relay's Service.
func TestEnvoyBootstraps(t *testing.T) {
	b := loadBase(t)
	wantAPI := map[string]corev3.ApiConfigSource_ApiType{
		"envoy-ads-sotw.yaml":  corev3.ApiConfigSource_GRPC,
		"envoy-ads-delta.yaml": corev3.ApiConfigSource_DELTA_GRPC,
	}
	files := glob(t, "bootstraps/envoy-ads-*.yaml")
	if len(files) != len(wantAPI) {
		t.Errorf("Envoy bootstraps %q, want %d", files, len(wantAPI))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			js, err := yaml.YAMLToJSON(read(t, f))
			if err != nil {
				t.Fatal(err)
			}
			var bs bootstrapv3.Bootstrap
			if err := protojson.Unmarshal(js, &bs); err != nil { // DiscardUnknown is off: unknown fields fail
				t.Fatalf("protojson: %v", err)
			}
			if err := bs.ValidateAll(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			validateAnys(t, bs.ProtoReflect())

			if bs.GetNode().GetId() == "" || bs.GetNode().GetCluster() == "" {
				t.Errorf("node %v: want id and cluster", bs.GetNode())
			}
			ads := bs.GetDynamicResources().GetAdsConfig()
			if want, ok := wantAPI[filepath.Base(f)]; !ok || ads.GetApiType() != want {
				t.Errorf("ads_config.api_type = %v, want %v", ads.GetApiType(), want)
			}
			if ads.GetTransportApiVersion() != corev3.ApiVersion_V3 {
				t.Errorf("ads_config.transport_api_version = %v, want V3", ads.GetTransportApiVersion())
			}
			for name, src := range map[string]*corev3.ConfigSource{
				"cds_config": bs.GetDynamicResources().GetCdsConfig(),
				"lds_config": bs.GetDynamicResources().GetLdsConfig(),
			} {
				if src.GetAds() == nil || src.GetResourceApiVersion() != corev3.ApiVersion_V3 {
					t.Errorf("%s = %v, want ads over V3", name, src)
				}
			}
			if len(ads.GetGrpcServices()) != 1 {
				t.Fatalf("ads_config.grpc_services = %v, want one", ads.GetGrpcServices())
			}
			cluster := ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()
			found := false
			for _, c := range bs.GetStaticResources().GetClusters() {
				if c.GetName() != cluster {
					continue
				}
				found = true
				sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
				if sa.GetAddress() != b.serviceHost() || sa.GetPortValue() != relayPort {
					t.Errorf("cluster %s points at %s:%d, want the relay Service %s:%d", cluster,
						sa.GetAddress(), sa.GetPortValue(), b.serviceHost(), relayPort)
				}
				if _, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; !ok {
					t.Errorf("cluster %s does not speak HTTP/2 (gRPC)", cluster)
				}
			}
			if !found {
				t.Errorf("ADS cluster %q is not a static cluster", cluster)
			}
		})
	}
}

// validateAnys unpacks every Any under m (which must resolve) and runs the
// generated validation of what it holds, recursively.
func validateAnys(t *testing.T, m protoreflect.Message) {
	t.Helper()
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				visitMessage(t, v.List().Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				visitMessage(t, mv.Message())
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			visitMessage(t, v.Message())
		}
		return true
	})
}

func visitMessage(t *testing.T, m protoreflect.Message) {
	t.Helper()
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		validateAnys(t, m)
		return
	}
	inner, err := a.UnmarshalNew()
	if err != nil {
		t.Errorf("Any %s: %v", a.GetTypeUrl(), err)
		return
	}
	if v, ok := inner.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("Any %s: %v", a.GetTypeUrl(), err)
		}
	}
	validateAnys(t, inner.ProtoReflect())
}

// grpcServer and grpcBootstrap are the gRPC xDS bootstrap (gRFC A27, A47
// for federation), for a strict decode that catches misspelt keys, which
// gRPC clients silently ignore.
type grpcServer struct {
	ServerURI    string `json:"server_uri"`
	ChannelCreds []struct {
		Type   string         `json:"type"`
		Config map[string]any `json:"config,omitempty"`
	} `json:"channel_creds"`
	ServerFeatures []string `json:"server_features,omitempty"`
}

type grpcBootstrap struct {
	XDSServers []grpcServer `json:"xds_servers"`
	Node       struct {
		ID       string `json:"id"`
		Cluster  string `json:"cluster,omitempty"`
		Locality *struct {
			Region  string `json:"region,omitempty"`
			Zone    string `json:"zone,omitempty"`
			SubZone string `json:"sub_zone,omitempty"`
		} `json:"locality"`
		Metadata map[string]any `json:"metadata,omitempty"`
	} `json:"node"`
	ClientDefaultListenerResourceNameTemplate string `json:"client_default_listener_resource_name_template,omitempty"`
	ServerListenerResourceNameTemplate        string `json:"server_listener_resource_name_template,omitempty"`
	Authorities                               map[string]struct {
		ClientListenerResourceNameTemplate string       `json:"client_listener_resource_name_template,omitempty"`
		XDSServers                         []grpcServer `json:"xds_servers,omitempty"`
	} `json:"authorities,omitempty"`
}

// nopClientConn is a resolver.ClientConn that drops everything: the
// resolver is closed before it could produce anything.
type nopClientConn struct{}

func (nopClientConn) UpdateState(resolver.State) error { return nil }
func (nopClientConn) ReportError(error)                {}
func (nopClientConn) NewAddress([]resolver.Address)    {}
func (nopClientConn) ParseServiceConfig(string) *serviceconfig.ParseResult {
	return &serviceconfig.ParseResult{}
}

// TestGRPCBootstraps decodes each gRPC bootstrap (grpc-go, grpc-js-xds,
// python grpcio) strictly, checks that every server is the relay, that
// federation names only authorities the relay's config knows, and has
// grpc-go itself parse it by building (and closing) its xDS resolver.
func TestGRPCBootstraps(t *testing.T) {
	b := loadBase(t)
	known := map[string]bool{}
	for _, a := range b.authorities(t) {
		known[a] = true
	}
	files := []string{"grpc-legacy.json", "grpc-federation.json", "node.json", "python.json"}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			data := read(t, filepath.Join("bootstraps", f))
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			var bs grpcBootstrap
			if err := dec.Decode(&bs); err != nil {
				t.Fatalf("strict decode: %v", err)
			}
			servers := append([]grpcServer(nil), bs.XDSServers...)
			for name, a := range bs.Authorities {
				if !known[name] {
					t.Errorf("authority %q is not configured in the relay's ConfigMap (known: %v)", name, b.authorities(t))
				}
				if tmpl := a.ClientListenerResourceNameTemplate; tmpl != "" && !strings.HasPrefix(tmpl, "xdstp://"+name+"/") {
					t.Errorf("authority %q template %q: want xdstp://%s/...", name, tmpl, name)
				}
				servers = append(servers, a.XDSServers...)
			}
			if len(bs.XDSServers) == 0 {
				t.Error("no xds_servers")
			}
			for _, s := range servers {
				host, port, err := net.SplitHostPort(s.ServerURI)
				if err != nil || port != strconv.Itoa(relayPort) || (host != "127.0.0.1" && host != b.serviceHost()) {
					t.Errorf("server_uri %q: want the relay, 127.0.0.1:%d or %s:%d", s.ServerURI, relayPort, b.serviceHost(), relayPort)
				}
				if len(s.ChannelCreds) == 0 || s.ChannelCreds[0].Type != "insecure" {
					t.Errorf("server %s: channel_creds %+v, want insecure", s.ServerURI, s.ChannelCreds)
				}
			}
			if bs.Node.ID == "" || bs.Node.Locality == nil {
				t.Errorf("node %+v: want an id and a locality (grpc-js-xds requires one)", bs.Node)
			}
			if tmpl := bs.ClientDefaultListenerResourceNameTemplate; tmpl != "" {
				u, err := url.Parse(strings.Replace(tmpl, "%s", "x", 1))
				if err != nil || u.Scheme != "xdstp" || !known[u.Host] {
					t.Errorf("client_default_listener_resource_name_template %q: want xdstp:// of a known authority", tmpl)
				}
			}

			targets := []string{"xds:///svc"}
			for name := range bs.Authorities {
				targets = append(targets, "xds://"+name+"/svc")
			}
			for _, target := range targets {
				buildGRPCResolver(t, data, target)
			}
		})
	}
}

// buildGRPCResolver has grpc-go parse bootstrap and check target against it
// (its xDS resolver's Build), then closes the resolver at once.
func buildGRPCResolver(t *testing.T, bootstrap []byte, target string) {
	t.Helper()
	builder, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatalf("grpc-go: %v", err)
	}
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	r, err := builder.Build(resolver.Target{URL: *u}, nopClientConn{}, resolver.BuildOptions{})
	if err != nil {
		t.Errorf("grpc-go rejects the bootstrap for %s: %v", target, err)
		return
	}
	r.Close()
}
