package rest_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// quiet is how long a test waits to prove that nothing arrives; the poll
// timeout of the tests that wait for a 304.
const quiet = 300 * time.Millisecond

// restRelay is a relay with its REST-JSON listener, in front of a
// go-control-plane upstream.
type restRelay struct {
	*xdstest.Relay
	up  *xdstest.Upstream
	url string
}

// startREST starts an upstream with res and a relay serving REST-JSON with
// the poll timeout pollTimeout.
func startREST(t *testing.T, res xdstest.Resources, pollTimeout time.Duration, opts ...xdstest.RelayOption) *restRelay {
	t.Helper()
	up := xdstest.StartUpstream(t)
	up.SetResources(res)
	opts = append([]xdstest.RelayOption{xdstest.WithConfig(func(c *config.Config) {
		c.REST = &config.REST{Listen: "127.0.0.1:0", PollTimeout: pollTimeout}
	})}, opts...)
	r := xdstest.StartRelay(t, up.Addr(), opts...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.ServeREST(lis) }()
	t.Cleanup(func() {
		_ = r.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeREST: %v", err)
		}
	})
	return &restRelay{Relay: r, up: up, url: "http://" + lis.Addr().String()}
}

// result is one HTTP answer.
type result struct {
	code int
	body string
	resp *discoverypb.DiscoveryResponse // decoded from body on 200
}

// post sends req as JSON to /v3/discovery:suffix and decodes a 200 answer
// with protojson (failing the test when it is not a DiscoveryResponse).
func (rr *restRelay) post(t *testing.T, suffix string, req *discoverypb.DiscoveryRequest) result {
	t.Helper()
	body, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return rr.postRaw(t, "/v3/discovery:"+suffix, body)
}

func (rr *restRelay) postRaw(t *testing.T, path string, body []byte) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.WaitTimeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, rr.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Errorf("POST %s: %v", path, err)
		return result{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	out := result{code: res.StatusCode, body: string(b)}
	if res.StatusCode == http.StatusOK {
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("POST %s: Content-Type %q", path, ct)
		}
		out.resp = &discoverypb.DiscoveryResponse{}
		if err := protojson.Unmarshal(b, out.resp); err != nil {
			t.Errorf("POST %s: the answer is not a DiscoveryResponse in proto3 JSON: %v\n%s", path, err, b)
		}
	}
	return out
}

// postAsync is post on its own goroutine: for polls that are held.
func (rr *restRelay) postAsync(t *testing.T, suffix string, req *discoverypb.DiscoveryRequest) <-chan result {
	ch := make(chan result, 1)
	go func() { ch <- rr.post(t, suffix, req) }()
	return ch
}

func request(node, version string, names ...string) *discoverypb.DiscoveryRequest {
	return &discoverypb.DiscoveryRequest{Node: &core.Node{Id: node, Cluster: "test"}, VersionInfo: version, ResourceNames: names}
}

// clusters builds a CDS-only resource set of EDS clusters.
func clusters(names ...string) xdstest.Resources {
	var rs []types.Resource
	for _, n := range names {
		rs = append(rs, xdstest.EDSCluster(n, "eds-"+n))
	}
	return xdstest.Resources{resource.ClusterType: rs}
}

// wantClusters checks a 200 answer: a CDS DiscoveryResponse holding exactly
// the clusters of want (compared message by message), with a version.
func wantClusters(t *testing.T, r result, want xdstest.Resources) {
	t.Helper()
	if r.code != http.StatusOK || r.resp == nil {
		t.Fatalf("answer %d %q, want 200 with clusters", r.code, r.body)
	}
	if r.resp.GetTypeUrl() != resource.ClusterType || r.resp.GetVersionInfo() == "" {
		t.Fatalf("answer type %q version %q", r.resp.GetTypeUrl(), r.resp.GetVersionInfo())
	}
	var got []*cluster.Cluster
	for _, a := range r.resp.GetResources() {
		c := &cluster.Cluster{}
		if err := a.UnmarshalTo(c); err != nil {
			t.Fatalf("resource %s: %v", a.GetTypeUrl(), err)
		}
		got = append(got, c)
	}
	exp := want[resource.ClusterType]
	if len(got) != len(exp) {
		t.Fatalf("answer holds %d clusters, want %d:\n%s", len(got), len(exp), r.body)
	}
	slices.SortFunc(got, func(a, b *cluster.Cluster) int { return strings.Compare(a.GetName(), b.GetName()) })
	for i, e := range exp {
		if !proto.Equal(got[i], e.(*cluster.Cluster)) {
			t.Fatalf("cluster %d = %v, want %v", i, got[i], e)
		}
	}
}

// wait returns the result of a held poll, failing after WaitTimeout.
func wait(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(xdstest.WaitTimeout + time.Second):
		t.Fatal("the poll was not answered")
		return result{}
	}
}

// held proves that a poll is still held after quiet.
func held(t *testing.T, ch <-chan result) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("the poll was answered %d %q, want it held", r.code, r.body)
	case <-time.After(quiet):
	}
}
