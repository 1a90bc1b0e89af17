package fleet_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

func TestSpecValidate(t *testing.T) {
	ok := fleet.Spec{Listeners: 1, Routes: 1, Clusters: 1, EndpointsPerCluster: 1}
	for _, tc := range []struct {
		name   string
		mutate func(*fleet.Spec)
		want   string // substring of the error; empty for valid
	}{
		{"valid", func(*fleet.Spec) {}, ""},
		{"grpc", func(s *fleet.Spec) { s.Style = fleet.StyleGRPC }, ""},
		{"no listeners", func(s *fleet.Spec) { s.Listeners = 0 }, "listeners"},
		{"too many listeners", func(s *fleet.Spec) { s.Listeners = 50001 }, "listeners"},
		{"no routes", func(s *fleet.Spec) { s.Routes = 0 }, "routes"},
		{"no clusters", func(s *fleet.Spec) { s.Clusters = -1 }, "clusters"},
		{"no endpoints", func(s *fleet.Spec) { s.EndpointsPerCluster = 0 }, "endpoints-per-cluster"},
		{"too many endpoints", func(s *fleet.Spec) { s.Clusters, s.EndpointsPerCluster = 1<<22, 8 }, "endpoints-per-cluster"},
		{"bad style", func(s *fleet.Spec) { s.Style = "nginx" }, "style"},
		{"authority", func(s *fleet.Spec) { s.Authority = "auth.example" }, ""},
		{"bad authority", func(s *fleet.Spec) { s.Authority = "a/b" }, "authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.mutate(&s)
			err := s.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "fleet: ") {
				t.Fatalf("Validate = %v, want an error about %q", err, tc.want)
			}
		})
	}
}

func TestParseKinds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []fleet.Kind
	}{
		{"eds", []fleet.Kind{fleet.Endpoints}},
		{"cds,eds", []fleet.Kind{fleet.Clusters, fleet.Endpoints}},
		{"LDS|rds|cds|eds", fleet.Kinds[:]},
		{" cds , cds ,eds", []fleet.Kind{fleet.Clusters, fleet.Endpoints}},
	} {
		got, err := fleet.ParseKinds(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseKinds(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", ",", "sds", "cds,xds"} {
		if got, err := fleet.ParseKinds(in); err == nil {
			t.Errorf("ParseKinds(%q) = %v, want an error", in, got)
		}
	}
}

func TestKinds(t *testing.T) {
	for _, k := range fleet.Kinds {
		got, ok := fleet.KindOf(k.TypeURL())
		if !ok || got != k {
			t.Errorf("KindOf(%s) = %v, %v", k.TypeURL(), got, ok)
		}
		if n := k.String(); len(n) != 3 {
			t.Errorf("%d.String() = %q", k, n)
		}
	}
	if _, ok := fleet.KindOf("type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"); ok {
		t.Error("KindOf(Secret) succeeded")
	}
	if s := fleet.Kind(9).String(); s != "kind(9)" {
		t.Errorf("Kind(9).String() = %q", s)
	}
	spec := fleet.Spec{Listeners: 2, Routes: 3, Clusters: 4, EndpointsPerCluster: 1}
	for k, want := range map[fleet.Kind]string{fleet.Listeners: "listener-1", fleet.Routes: "route-1",
		fleet.Clusters: "cluster-1", fleet.Endpoints: "cluster-1"} {
		if got := spec.Name(k, 1); got != want {
			t.Errorf("Name(%v, 1) = %q, want %q", k, got, want)
		}
		if got := spec.Count(k); got == 0 {
			t.Errorf("Count(%v) = 0", k)
		}
	}
	if got := spec.Count(fleet.Kind(7)); got != 0 {
		t.Errorf("Count(7) = %d", got)
	}
	for _, s := range []string{"envoy", "grpc"} {
		if got, err := fleet.ParseStyle(s); err != nil || string(got) != s {
			t.Errorf("ParseStyle(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := fleet.ParseStyle("istio"); err == nil {
		t.Error("ParseStyle(istio) succeeded")
	}
}

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in       string
		perSec   float64
		interval time.Duration
		str      string
	}{
		{"0", 0, 0, "0"},
		{"0/s", 0, 0, "0"},
		{"5/s", 5, 200 * time.Millisecond, "5/s"},
		{"5", 5, 200 * time.Millisecond, "5/s"},
		{"0.5/s", 0.5, 2 * time.Second, "0.5/s"},
		{"120/m", 2, 500 * time.Millisecond, "2/s"},
		{"3600/h", 1, time.Second, "1/s"},
		{" 10 / s ", 10, 100 * time.Millisecond, "10/s"},
		{"1e12/s", 1e12, 1, "1e+12/s"},
	} {
		r, err := fleet.ParseRate(tc.in)
		if err != nil {
			t.Errorf("ParseRate(%q): %v", tc.in, err)
			continue
		}
		if float64(r) != tc.perSec || r.Interval() != tc.interval || r.String() != tc.str {
			t.Errorf("ParseRate(%q) = %v/s interval %v %q; want %v/s %v %q", tc.in, float64(r), r.Interval(), r.String(),
				tc.perSec, tc.interval, tc.str)
		}
	}
	for _, in := range []string{"", "fast", "-1/s", "5/d", "NaN", "Inf/s", "5/"} {
		if r, err := fleet.ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %v, want an error", in, r)
		}
	}
}

func TestParseVariants(t *testing.T) {
	v, err := fleet.ParseVariants("env=prod,test")
	if err != nil || v.Key != "env" || !slices.Equal(v.Values, []string{"prod", "test"}) || v.String() != "env=prod,test" {
		t.Fatalf("ParseVariants = %+v, %v", v, err)
	}
	if v, err := fleet.ParseVariants(""); err != nil || len(v.Values) != 0 || v.String() != "" {
		t.Fatalf("empty: %+v, %v", v, err)
	}
	for _, bad := range []string{"env", "=prod", "env=", "env=a,,b", "env=a,a"} {
		if _, err := fleet.ParseVariants(bad); err == nil || !strings.HasPrefix(err.Error(), "fleet: ") {
			t.Errorf("ParseVariants(%q) = %v", bad, err)
		}
	}
}
