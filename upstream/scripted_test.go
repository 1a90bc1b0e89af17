package upstream_test

import (
	"sync/atomic"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// scriptedADS is an ADS server that sends, on each stream, what the test
// pushes on the channel of the stream's protocol, and reads requests only
// to see the stream end.
type scriptedADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	sotw  chan *discoveryv3.DiscoveryResponse
	delta chan *discoveryv3.DeltaDiscoveryResponse
	// streams counts the streams opened: a push goes to the newest.
	streams atomic.Int64
}

func (f *scriptedADS) StreamAggregatedResources(st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	id := f.streams.Add(1)
	return sendPushed(st.Recv, st.Send, f.sotw, func() bool { return f.streams.Load() == id })
}

func (f *scriptedADS) DeltaAggregatedResources(st discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	id := f.streams.Add(1)
	return sendPushed(st.Recv, st.Send, f.delta, func() bool { return f.streams.Load() == id })
}

// sendPushed sends every response pushed on resp until the stream ends. A
// stream the client has replaced, whose end has not reached the server yet
// on a loaded machine, hands a push back for the newest (newest).
func sendPushed[Req, Resp any](recv func() (Req, error), send func(Resp) error, resp chan Resp, newest func() bool) error {
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
			if !newest() {
				resp <- r
				return nil
			}
			if err := send(r); err != nil {
				return err
			}
		case err := <-errc:
			return err
		}
	}
}
