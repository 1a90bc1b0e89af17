package rest_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/xdstest"
)

// Every bad request gets a clear answer naming the problem, and the relay
// goes on serving good ones.
func TestBadRequests(t *testing.T) {
	first := clusters("c1")
	rr := startREST(t, first, quiet, xdstest.WithConfig(func(c *config.Config) {
		c.Limits.MaxNamesPerRequest = 3
		c.Limits.MaxRecvMessageBytes = 1 << 10
	}))
	tests := []struct {
		name, method, path, body string
		code                     int
		want                     string
	}{
		{"malformed JSON", "POST", "/v3/discovery:clusters", `{"node": `, 400, "not a DiscoveryRequest in proto3 JSON"},
		{"not an object", "POST", "/v3/discovery:clusters", `[1,2]`, 400, "not a DiscoveryRequest"},
		{"wrong field type", "POST", "/v3/discovery:clusters", `{"resource_names": "c1"}`, 400, "not a DiscoveryRequest"},
		{"wrong type_url", "POST", "/v3/discovery:clusters", `{"type_url": "` + resource.ListenerType + `"}`, 400,
			`type_url "` + resource.ListenerType + `" on the endpoint of ` + resource.ClusterType},
		{"locators", "POST", "/v3/discovery:clusters", `{"resource_locators": [{"name": "c1"}]}`, 400, "resource_locators (TP2) are served over gRPC only"},
		{"too many names", "POST", "/v3/discovery:endpoints", `{"resource_names": ["a","b","c","d"]}`, 413, "4 resource names in one request, the limit is 3"},
		{"NUL in a name", "POST", "/v3/discovery:endpoints", `{"resource_names": ["a\u0000b"]}`, 400, "contains a NUL byte"},
		{"body too large", "POST", "/v3/discovery:clusters", `{"version_info": "` + strings.Repeat("x", 2<<10) + `"}`, 413, "request body over 1024 bytes"},
		{"unknown type", "POST", "/v3/discovery:widgets", `{}`, 404, "unknown REST-JSON endpoint /v3/discovery:widgets"},
		{"other path", "POST", "/v2/discovery:clusters", `{}`, 404, "POST /v3/discovery:TYPE"},
		{"GET", "GET", "/v3/discovery:clusters", ``, 405, "REST-JSON polls are POST requests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, rr.url+tt.path, bytes.NewReader([]byte(tt.body)))
			if err != nil {
				t.Fatal(err)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var b bytes.Buffer
			_, _ = b.ReadFrom(res.Body)
			if res.StatusCode != tt.code || !strings.Contains(b.String(), tt.want) {
				t.Fatalf("%s %s: %d %q, want %d with %q", tt.method, tt.path, res.StatusCode, b.String(), tt.code, tt.want)
			}
		})
	}
	// Unknown fields (a newer client) are ignored, and good polls are served.
	r := rr.postRaw(t, "/v3/discovery:clusters", []byte(`{"node": {"id": "envoy-1"}, "some_future_field": 1}`))
	wantClusters(t, r, first)
	if got := rr.metric(t, `xds_relay_rejected_requests_total{reason="malformed_json"}`); got != 3 {
		t.Errorf("malformed_json rejections %v, want 3", got)
	}
}

// Many polls held at once all get their answer when the upstream changes
// (the limit on held polls is TestPollLimit's).
func TestPollFlood(t *testing.T) {
	first := clusters("c1")
	rr := startREST(t, first, 10*xdstest.WaitTimeout)
	v := rr.post(t, "clusters", request("n", "")).resp.GetVersionInfo()
	const n = 50
	chans := make([]<-chan result, n)
	for i := range n {
		chans[i] = rr.postAsync(t, "clusters", request("node-"+string(rune('a'+i%26))+string(rune('a'+i/26)), v))
	}
	gauge := `xds_relay_downstream_streams{protocol="rest",type_url="` + resource.ClusterType + `"}`
	xdstest.Eventually(t, func() bool { return rr.metric(t, gauge) == n }, "every poll held", nil)
	second := clusters("c1", "c2")
	rr.up.SetResources(second)
	for _, ch := range chans {
		wantClusters(t, wait(t, ch), second)
	}
}

// Secrets need mTLS: over plaintext a named secret is answered with a TP3
// PERMISSION_DENIED error, not the secret; a rule that denies the wildcard
// refuses the poll 403.
func TestPollAuthorization(t *testing.T) {
	rr := startREST(t, clusters("c1"), quiet, xdstest.WithConfig(func(c *config.Config) {
		c.Authorization = &config.Authorization{Rules: []config.AuthzRule{
			{Nodes: []string{"trusted-*"}},
			{Nodes: []string{"envoy-*"}, Types: []string{"Secret", "ClusterLoadAssignment"}},
		}}
	}))
	r := rr.post(t, "secrets", request("envoy-1", "", "server-cert"))
	if r.code != http.StatusOK || len(r.resp.GetResources()) != 0 || len(r.resp.GetResourceErrors()) != 1 {
		t.Fatalf("secret over plaintext: %d %q, want 200 with one resource error", r.code, r.body)
	}
	e := r.resp.GetResourceErrors()[0]
	if e.GetResourceName().GetName() != "server-cert" || e.GetErrorDetail().GetCode() != 7 ||
		!strings.Contains(e.GetErrorDetail().GetMessage(), "mTLS") {
		t.Fatalf("resource error %v, want PERMISSION_DENIED for server-cert", e)
	}
	// The same denial is not news on the next poll of that version.
	if r2 := rr.post(t, "secrets", request("envoy-1", r.resp.GetVersionInfo(), "server-cert")); r2.code != http.StatusNotModified {
		t.Fatalf("repeated denial: %d %q, want 304", r2.code, r2.body)
	}

	r = rr.post(t, "clusters", request("envoy-1", ""))
	if r.code != http.StatusForbidden || !strings.Contains(r.body, "not allowed to subscribe to every "+resource.ClusterType) {
		t.Fatalf("denied wildcard: %d %q, want 403", r.code, r.body)
	}
	wantClusters(t, rr.post(t, "clusters", request("trusted-1", "")), clusters("c1"))
}

// The answer is proto3 canonical JSON that Envoy's parser takes: typed Any
// with "@type", lowerCamelCase field names, every resource decodable.
func TestAnswerIsCanonicalJSON(t *testing.T) {
	rr := startREST(t, clusters("c1"), quiet)
	r := rr.post(t, "clusters", &discoverypb.DiscoveryRequest{})
	for _, want := range []string{`"versionInfo":`, `"typeUrl":"` + resource.ClusterType + `"`, `"@type":"` + resource.ClusterType + `"`, `"name":"c1"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("answer lacks %s:\n%s", want, r.body)
		}
	}
}
