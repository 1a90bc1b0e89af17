package main

import (
	"context"
	"net"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/internal/gatewaycp"
)

// gatewayOptions are the flags of --dialect gateway.
type gatewayOptions struct {
	clusters int // gateway clusters gw-0, gw-1, ... (one snapshot each)
	secrets  int
}

// runGateway serves a gateway.control.v1 control plane on lis (the
// generated fleet per gateway cluster) until ctx ends, churning --churn-count
// routes of the next cluster at the --churn rate.
func runGateway(ctx context.Context, o options, lis net.Listener, log *zap.Logger) {
	cp := gatewaycp.Serve(lis)
	defer cp.Stop()
	sp := o.server.Spec
	f := gatewaycp.NewFleet(gatewaycp.Spec{Listeners: sp.Listeners, Routes: sp.Routes, Backends: sp.Clusters,
		EndpointsPerBackend: sp.EndpointsPerCluster, Secrets: o.gateway.secrets})
	now := time.Now()
	for i := range o.gateway.clusters {
		cp.Set(gatewayCluster(i), f.Snapshot(gatewayCluster(i), now))
	}
	log.Info("gateway.control.v1 control plane serving", zap.String("listen", cp.Addr()),
		zap.Int("clusters", o.gateway.clusters), zap.Int("routes", sp.Routes), zap.Stringer("churn", o.server.Churn))
	changes := 0
	if iv := o.server.Churn.Interval(); iv > 0 {
		t := time.NewTicker(iv)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				log.Info("xds-democp stopped", zap.Int("changes", changes))
				return
			case now := <-t.C:
				c := gatewayCluster(changes % o.gateway.clusters)
				v := cp.Set(c, f.Churn(c, o.server.ChurnCount, now))
				changes++
				log.Debug("change", zap.String("cluster", c), zap.String("version", v))
			}
		}
	}
	<-ctx.Done()
	log.Info("xds-democp stopped", zap.Int("changes", changes))
}

func gatewayCluster(i int) string { return "gw-" + strconv.Itoa(i) }
