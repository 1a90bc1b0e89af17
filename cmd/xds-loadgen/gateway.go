package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/internal/gatewaycp"
)

// Dialect is the protocol the simulated clients speak.
type Dialect string

const (
	// DialectXDS is envoy xDS (ADS).
	DialectXDS Dialect = "xds"
	// DialectGateway is gateway.control.v1: SotW snapshots
	// (StreamConfiguration) or Delta resources (DeltaStreamConfiguration).
	DialectGateway Dialect = "gateway"
)

// gatewayTypes maps the short names of --gateway-types to type URLs.
var gatewayTypes = map[string]string{
	"listener": controlv1.ListenerType, "httproute": controlv1.HttpRouteType, "grpcroute": controlv1.GrpcRouteType,
	"streamroute": controlv1.StreamRouteType, "backend": controlv1.BackendClusterType, "secret": controlv1.SecretMaterialType,
}

// parseGatewayTypes parses --gateway-types: "all", or short names split by
// commas.
func parseGatewayTypes(s string) ([]string, error) {
	if s == "all" {
		return controlv1.ResourceTypes, nil
	}
	var out []string
	for _, n := range strings.Split(s, ",") {
		t, ok := gatewayTypes[n]
		if !ok {
			return nil, fmt.Errorf("loadgen: --gateway-types: unknown type %q (want all or listener, httproute, grpcroute, streamroute, backend, secret)", n)
		}
		out = append(out, t)
	}
	return out, nil
}

// gatewayState is a gateway client's state, kept across reconnects (as a
// data plane keeps its configuration). Owned by the client goroutine.
type gatewayState struct {
	version string                       // SotW: the snapshot version held
	held    map[string]map[string]string // Delta: type → name → version held
}

// gatewayCluster is the cluster client i presents: gw-(i mod GatewayClusters).
func (c *client) gatewayCluster() string {
	return "gw-" + strconv.Itoa(c.id%c.e.cfg.GatewayClusters)
}

// runGateway runs one gateway.control.v1 stream; it reports whether any
// response arrived.
func (c *client) runGateway(ctx context.Context) (bool, error) {
	if c.gw == nil {
		c.gw = &gatewayState{held: make(map[string]map[string]string)}
	}
	c.e.ctr.connected.Add(1)
	defer c.e.ctr.connected.Add(-1)
	if c.e.cfg.Protocol == ProtocolDelta {
		return c.runGatewayDelta(ctx)
	}
	return c.runGatewaySotW(ctx)
}

// runGatewaySotW subscribes to the snapshot of its cluster with the version
// it holds, and ACKs (or NACKs) every snapshot. The snapshot is not decoded:
// its version and generated_at (propagation) are read from the bytes.
func (c *client) runGatewaySotW(ctx context.Context) (bool, error) {
	cs, err := c.conn.NewStream(ctx, &controlv1.ConfigurationDiscoveryService_ServiceDesc.Streams[0],
		controlv1.ConfigurationDiscoveryService_StreamConfiguration_FullMethodName)
	if err != nil {
		return false, fmt.Errorf("loadgen: open stream: %w", err)
	}
	base := &controlv1.DiscoveryRequest{NodeId: c.node.GetId(), Cluster: c.gatewayCluster(), Subscriptions: c.e.cfg.GatewayTypes}
	first := proto.Clone(base).(*controlv1.DiscoveryRequest)
	first.Version = c.gw.version
	if err := cs.SendMsg(first); err != nil {
		return false, fmt.Errorf("loadgen: send: %w", err)
	}
	got := false
	for {
		if got {
			c.pause(ctx)
		}
		m := new(emptypb.Empty)
		if err := cs.RecvMsg(m); err != nil {
			return got, fmt.Errorf("loadgen: receive: %w", err)
		}
		got = true
		now := time.Now()
		c.e.ctr.responses.Add(1)
		raw := m.ProtoReflect().GetUnknown()
		version, nonce, at := gatewaycp.SnapshotInfo(raw)
		if ce := c.e.log.Check(zap.DebugLevel, "gateway snapshot"); ce != nil {
			ce.Write(zap.Int("client", c.id), zap.String("version", version), zap.Int("bytes", len(raw)))
		}
		ack := &controlv1.DiscoveryRequest{Nonce: nonce, Version: version, ResultStatus: gatewaycp.ACK}
		switch {
		case c.nack:
			ack.ResultStatus, ack.ErrorDetail, ack.Version = gatewaycp.NACK, "xds-loadgen: simulated NACK", c.gw.version
			c.e.ctr.nacks.Add(1)
		case !c.syncedAt.IsZero() && version != c.gw.version:
			c.counted(now, at.UnixNano())
			c.gw.version = version
		default:
			c.gw.version = version
		}
		if c.syncedAt.IsZero() {
			c.markSynced(now) // answered: a NACKing client counts as synced too
		}
		if err := cs.SendMsg(ack); err != nil {
			return got, fmt.Errorf("loadgen: send: %w", err)
		}
	}
}

// runGatewayDelta subscribes to the configured types with what it holds as
// initial_resource_versions, applies every response and ACKs (or NACKs) it;
// it is synced once every type was answered.
func (c *client) runGatewayDelta(ctx context.Context) (bool, error) {
	cs, err := c.conn.NewStream(ctx, &controlv1.DeltaDiscoveryService_ServiceDesc.Streams[0],
		controlv1.DeltaDiscoveryService_DeltaStreamConfiguration_FullMethodName)
	if err != nil {
		return false, fmt.Errorf("loadgen: open delta stream: %w", err)
	}
	req := &controlv1.DeltaDiscoveryRequest{NodeId: c.node.GetId(), Cluster: c.gatewayCluster(),
		ResourceNamesSubscribe: c.e.cfg.GatewayTypes, InitialResourceVersions: map[string]string{}}
	for t, vs := range c.gw.held {
		req.InitialResourceVersions[t] = jsonObject(vs)
	}
	if err := cs.SendMsg(req); err != nil {
		return false, fmt.Errorf("loadgen: send: %w", err)
	}
	answered := map[string]bool{}
	got := false
	for {
		if got {
			c.pause(ctx)
		}
		resp := new(controlv1.DeltaDiscoveryResponse)
		if err := cs.RecvMsg(resp); err != nil {
			return got, fmt.Errorf("loadgen: receive: %w", err)
		}
		got = true
		now := time.Now()
		c.e.ctr.responses.Add(1)
		t := resp.GetTypeUrl()
		h := c.gw.held[t]
		if h == nil {
			h = make(map[string]string)
			c.gw.held[t] = h
		}
		if resp.GetNonIncremental() {
			clear(h)
		}
		for _, r := range resp.GetResources() {
			h[r.GetName()] = r.GetVersion()
			if !c.syncedAt.IsZero() {
				c.counted(now, stampOf(t, r))
			}
		}
		for _, n := range resp.GetRemovedResources() {
			delete(h, n)
		}
		ack := &controlv1.DeltaDiscoveryRequest{ResponseNonce: resp.GetNonce(), TypeUrl: t, ResultStatus: gatewaycp.ACK}
		if c.nack {
			ack.ResultStatus, ack.ErrorDetail = gatewaycp.NACK, "xds-loadgen: simulated NACK"
			c.e.ctr.nacks.Add(1)
		}
		answered[t] = true
		if c.syncedAt.IsZero() && len(answered) == len(c.e.cfg.GatewayTypes) {
			c.markSynced(now)
		}
		if err := cs.SendMsg(ack); err != nil {
			return got, fmt.Errorf("loadgen: send: %w", err)
		}
	}
}

// stampOf reads the creation stamp xds-democp writes into listeners and
// routes (0 for other types).
func stampOf(typeURL string, r *controlv1.Resource) int64 {
	var m proto.Message
	switch typeURL {
	case controlv1.ListenerType:
		m = new(controlv1.Listener)
	case controlv1.HttpRouteType:
		m = new(controlv1.HttpRoute)
	default:
		return 0
	}
	if r.GetResource().UnmarshalTo(m) != nil {
		return 0
	}
	return gatewaycp.CreatedUnixNano(m)
}

func jsonObject(vs map[string]string) string {
	b, _ := json.Marshal(vs) // a map of strings always encodes
	return string(b)
}
