package upstream_test

import (
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// scriptedADS is an ADS server that sends, on each stream, what the test
// pushes on the channel of the stream's protocol, and reads requests only
// to see the stream end.
type scriptedADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	sotw  chan *discoveryv3.DiscoveryResponse
	delta chan *discoveryv3.DeltaDiscoveryResponse
}

func (f *scriptedADS) StreamAggregatedResources(st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return sendPushed(st.Recv, st.Send, f.sotw)
}

func (f *scriptedADS) DeltaAggregatedResources(st discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return sendPushed(st.Recv, st.Send, f.delta)
}

// sendPushed sends every response pushed on resp until the stream ends.
func sendPushed[Req, Resp any](recv func() (Req, error), send func(Resp) error, resp <-chan Resp) error {
	errc := make(chan error, 1)
	go func() {
		for {
			if _, err := recv(); err != nil {
				errc <- err
				return
			}
		}
	}()
	for {
		select {
		case r := <-resp:
			if err := send(r); err != nil {
				return err
			}
		case err := <-errc:
			return err
		}
	}
}
