package gateway

import "github.com/prometheus/client_golang/prometheus"

// gatewayMetrics are the gateway's own families, on the relay's registry.
// Its streams, responses, ACKs and NACKs are counted in the relay's families
// (xds_relay_downstream_streams, xds_relay_responses_total, ...) with the
// protocol label gateway-sotw or gateway-delta.
type gatewayMetrics struct {
	// groups is xds_relay_gateway_groups{protocol}: snapshot groups, each
	// with one upstream stream.
	groups *prometheus.GaugeVec
	// connected is xds_relay_gateway_upstream_connected{protocol}: groups
	// whose upstream stream is answered.
	connected *prometheus.GaugeVec
	// upstreamResponses is xds_relay_gateway_upstream_responses_total{protocol,result}.
	upstreamResponses *prometheus.CounterVec
	// dataplanes is xds_relay_gateway_dataplanes{version,ready}: data planes
	// by their latest status report (label sets of versions nobody reports
	// any more are deleted).
	dataplanes *prometheus.GaugeVec
	// reports is xds_relay_gateway_reports_total{result}: received,
	// forwarded, failed (after the retries), dropped (too many pending).
	reports *prometheus.CounterVec
}

func newGatewayMetrics(reg prometheus.Registerer) *gatewayMetrics {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "xds_relay", Subsystem: "gateway", Name: name, Help: help}
	}
	m := &gatewayMetrics{
		groups: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("groups",
			"gateway.control.v1 snapshot groups (one upstream stream each), by protocol.")), []string{"protocol"}),
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("upstream_connected",
			"gateway.control.v1 groups whose upstream stream is up and answered, by protocol.")), []string{"protocol"}),
		upstreamResponses: prometheus.NewCounterVec(prometheus.CounterOpts(opts("upstream_responses_total",
			"gateway.control.v1 responses from upstream, by whether the relay accepted (ack) or rejected (nack) them.")),
			[]string{"protocol", "result"}),
		dataplanes: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("dataplanes",
			"Data planes by the version and readiness of their latest status report.")), []string{"version", "ready"}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts(opts("reports_total",
			"Status reports: received, forwarded upstream, failed after the retries, dropped while too many were pending.")),
			[]string{"result"}),
	}
	reg.MustRegister(m.groups, m.connected, m.upstreamResponses, m.dataplanes, m.reports)
	return m
}
