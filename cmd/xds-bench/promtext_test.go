package main

import "testing"

func TestParseMetrics(t *testing.T) {
	text := `# HELP xds_relay_response_bytes_total Bytes of serialized discovery responses.
# TYPE xds_relay_response_bytes_total counter
xds_relay_response_bytes_total{protocol="delta",type_url="type.googleapis.com/envoy.config.cluster.v3.Cluster"} 2630
xds_relay_response_bytes_total{protocol="sotw",type_url="type.googleapis.com/envoy.config.cluster.v3.Cluster"} 1.6e+06
xds_relay_response_bytes_total{protocol="sotw",type_url="type.googleapis.com/envoy.config.listener.v3.Listener"} 400
# TYPE xds_relay_upstream_connected gauge
xds_relay_upstream_connected{authority="",scope="shared",server="127.0.0.1:18000"} 1
go_memstats_heap_inuse_bytes 5.2e+07 1700000000000
weird{a="x\"y,z",b="q\\"} 3
# TYPE xds_relay_propagation_seconds histogram
xds_relay_propagation_seconds_bucket{le="0.001"} 1
xds_relay_propagation_seconds_bucket{le="+Inf"} 2
xds_relay_propagation_seconds_sum 0.5
xds_relay_propagation_seconds_count 2
`
	m, err := parseMetrics(text)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		match map[string]string
		want  float64
		found bool
	}{
		{"xds_relay_response_bytes_total", nil, 1600000 + 2630 + 400, true},
		{"xds_relay_response_bytes_total", map[string]string{"protocol": "sotw"}, 1600400, true},
		{"xds_relay_response_bytes_total", map[string]string{"protocol": "delta"}, 2630, true},
		{"xds_relay_response_bytes_total", map[string]string{"protocol": "rest"}, 0, false},
		{"xds_relay_upstream_connected", nil, 1, true},
		{"go_memstats_heap_inuse_bytes", nil, 5.2e7, true},
		{"weird", map[string]string{"a": `x"y,z`, "b": `q\`}, 3, true},
		{"xds_relay_propagation_seconds", nil, 0, false},
		{"absent", nil, 0, false},
	} {
		got, found := m.sum(tc.name, tc.match)
		if got != tc.want || found != tc.found {
			t.Errorf("sum(%s, %v) = %v, %v; want %v, %v", tc.name, tc.match, got, found, tc.want, tc.found)
		}
	}
	for _, bad := range []string{"broken{a=\"x\" 4\n", "no_value\n"} {
		if _, err := parseMetrics(bad); err == nil {
			t.Errorf("parseMetrics(%q): no error", bad)
		}
	}
}
