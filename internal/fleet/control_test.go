package fleet_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

func TestControlHandler(t *testing.T) {
	spec := fleet.Spec{Listeners: 1, Routes: 1, Clusters: 3, EndpointsPerCluster: 1}
	srv, err := fleet.NewServer(fleet.ServerConfig{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.ControlHandler()
	do := func(method, target string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
		return rec
	}
	if rec := do(http.MethodGet, "/healthz"); rec.Code != http.StatusOK {
		t.Fatalf("healthz: %d", rec.Code)
	}
	rec := do(http.MethodPost, "/change?type=cds&count=2")
	if rec.Code != http.StatusOK {
		t.Fatalf("change: %d %s", rec.Code, rec.Body)
	}
	var c fleet.ChangeJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil {
		t.Fatal(err)
	}
	if c.Seq != 1 || c.Type != "cds" || len(c.Names) != 2 || c.Names[0] != fleet.ClusterName(0) || c.CreatedUnixNano == 0 {
		t.Errorf("change = %+v", c)
	}
	// The default kind is the first churn kind (EDS), and the cursors are per kind.
	rec = do(http.MethodPost, "/change")
	if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil {
		t.Fatal(err)
	}
	if c.Seq != 2 || c.Type != "eds" || len(c.Names) != 1 || c.Names[0] != fleet.ClusterName(0) || srv.Changes() != 2 {
		t.Errorf("default change = %+v", c)
	}
	for _, target := range []string{"/change?type=sds", "/change?type=cds,eds", "/change?count=0", "/change?count=x"} {
		if rec := do(http.MethodPost, target); rec.Code != http.StatusBadRequest {
			t.Errorf("POST %s: %d, want 400", target, rec.Code)
		}
	}
	if rec := do(http.MethodGet, "/change"); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /change: %d, want 405", rec.Code)
	}
	if _, err := srv.ChangeKind(fleet.Kind(9), 1); err == nil {
		t.Error("ChangeKind(9) succeeded")
	}
}
