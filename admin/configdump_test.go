package admin_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/admin"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// GET /debug/config_dump shows the cache with each resource's body as the
// clients received it, filtered by type, name and node, paged with next
// URLs that keep the filters; bad parameters are a 400 naming them.
func TestConfigDump(t *testing.T) {
	up := xdstest.StartUpstream(t)
	up.SetResources(xdstest.GRPCResources("svc", "127.0.0.1:1"))
	r := xdstest.StartRelay(t, up.Addr())
	srv := httptest.NewServer(admin.Handler(r.Relay))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	n := xdstest.NamesFor("svc")
	c1 := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "client-1"})
	c1.Subscribe(resource.ListenerType, n.Listener)
	lis := c1.RecvType(resource.ListenerType)
	c1.Ack(lis)
	c2 := xdstest.DialADS(t, r.Addr(), &core.Node{Id: "client-2"})
	c2.Subscribe(resource.ClusterType)
	cds := c2.RecvType(resource.ClusterType)
	c2.Ack(cds)

	var all admin.DumpPage
	getJSON(t, srv.URL+"/debug/config_dump", &all)
	if len(all.Resources) != 2 || all.Next != "" {
		t.Fatalf("the whole cache: %+v, want the listener and the cluster, one page", all)
	}
	byType := map[string]admin.DumpEntry{}
	for _, e := range all.Resources {
		byType[e.TypeURL] = e
	}
	for typeURL, got := range map[string]*anypb.Any{resource.ListenerType: lis.GetResources()[0],
		resource.ClusterType: cds.GetResources()[0]} {
		e := byType[typeURL]
		body := &anypb.Any{}
		if err := protojson.Unmarshal(e.Resource, body); err != nil {
			t.Fatalf("%s body %s: %v", typeURL, e.Resource, err)
		}
		if d := cmp.Diff(got, body, protocmp.Transform()); d != "" || !strings.Contains(string(e.Resource), `"@type"`) {
			t.Errorf("%s body, not as the client received it (-got by client +dumped):\n%s", typeURL, d)
		}
		if e.Version == "" || e.Name == "" {
			t.Errorf("%s: no name or version: %+v", typeURL, e)
		}
	}

	for _, tc := range []struct{ query, want string }{
		{"type=Listener", resource.ListenerType},
		{"type=" + resource.ClusterType, resource.ClusterType},
		{"name=" + n.Listener, resource.ListenerType},
		{"node=client-1", resource.ListenerType},
		{"node=client-2&type=Cluster", resource.ClusterType},
	} {
		var p admin.DumpPage
		getJSON(t, srv.URL+"/debug/config_dump?"+tc.query, &p)
		if len(p.Resources) != 1 || p.Resources[0].TypeURL != tc.want || p.Resources[0].Version != byType[tc.want].Version {
			t.Errorf("?%s = %+v, want the %s alone", tc.query, p, tc.want)
		}
	}
	var none admin.DumpPage
	getJSON(t, srv.URL+"/debug/config_dump?node=client-1&type=Cluster", &none)
	if len(none.Resources) != 0 {
		t.Errorf("client-1's clusters: %+v, want none", none)
	}

	// Paged one by one, following next: every resource once, in order.
	var seen []string
	for next := "/debug/config_dump?limit=1"; next != ""; {
		var p admin.DumpPage
		getJSON(t, srv.URL+next, &p)
		for _, e := range p.Resources {
			seen = append(seen, e.TypeURL)
		}
		if p.Next != "" && !strings.Contains(p.Next, "limit=1") {
			t.Fatalf("next %q drops the limit", p.Next)
		}
		next = p.Next
	}
	if !cmp.Equal(seen, []string{resource.ClusterType, resource.ListenerType}) {
		t.Errorf("paged through %v, want the cluster then the listener", seen)
	}
	var typed admin.DumpPage
	getJSON(t, srv.URL+"/debug/config_dump?type=Cluster&limit=1", &typed)
	if typed.Next != "" {
		t.Errorf("one cluster, limit 1: next %q, want none", typed.Next)
	}

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "next=%25%25", "nmae=x"} {
		got := get(t, http.MethodGet, srv.URL+"/debug/config_dump?"+q)
		if got.code != http.StatusBadRequest || !strings.Contains(got.body, strings.Split(q, "=")[0]) {
			t.Errorf("?%s = %d %q, want 400 naming it", q, got.code, got.body)
		}
	}
}
