package main

import (
	"fmt"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

// payload is what one cluster change costs on the wire at least.
type payload struct {
	// SotW is a whole CDS DiscoveryResponse of every cluster, encoded: what a
	// SotW client receives for one changed cluster, and what the TCP limit writes.
	SotW []byte
	// Cluster is the encoded size of one Cluster: the least a Delta client can receive.
	Cluster int
}

// cdsPayload builds the CDS response of the fleet xds-democp serves by default.
func cdsPayload(clusters int) (payload, error) {
	spec := fleet.Spec{Listeners: 1, Routes: 1, Clusters: clusters, EndpointsPerCluster: 2, Style: fleet.StyleEnvoy}
	if err := spec.Validate(); err != nil {
		return payload{}, fmt.Errorf("bench: %w", err)
	}
	now := time.Now()
	resp := &discoveryv3.DiscoveryResponse{
		VersionInfo: "0123456789abcdef", // a content-hash-sized version
		TypeUrl:     fleet.Clusters.TypeURL(),
		Nonce:       "12345",
	}
	var p payload
	for i := range clusters {
		c := spec.Cluster(i, now)
		a, err := anypb.New(c)
		if err != nil {
			return p, fmt.Errorf("bench: marshal cluster: %w", err)
		}
		if i == 0 {
			p.Cluster = proto.Size(c)
		}
		resp.Resources = append(resp.Resources, a)
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		return p, fmt.Errorf("bench: marshal response: %w", err)
	}
	p.SotW = b
	return p, nil
}
