package xdstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/upstream"
)

// GatewayDataPlane is a gateway.control.v1 data plane: one StreamConfiguration or
// DeltaStreamConfiguration stream on its own connection. It sends exactly
// the requests a test asks for and hands over responses one by one. Closed
// when the test ends.
type GatewayDataPlane[Req, Resp any] struct {
	tb     testing.TB
	conn   *grpc.ClientConn
	stream grpc.ClientStream
	cancel context.CancelFunc
	recv   chan gatewayResult[Resp]
	done   chan struct{}
}

type gatewayResult[Resp any] struct {
	resp *Resp
	err  error
}

// GatewaySotW is a StreamConfiguration data plane.
type GatewaySotW = GatewayDataPlane[controlv1.DiscoveryRequest, controlv1.DiscoveryResponse]

// GatewayDelta is a DeltaStreamConfiguration data plane.
type GatewayDelta = GatewayDataPlane[controlv1.DeltaDiscoveryRequest, controlv1.DeltaDiscoveryResponse]

// DialGatewaySotW opens a StreamConfiguration stream to addr.
func DialGatewaySotW(tb testing.TB, addr string) *GatewaySotW {
	tb.Helper()
	return dialGateway[controlv1.DiscoveryRequest, controlv1.DiscoveryResponse](tb, addr,
		&controlv1.ConfigurationDiscoveryService_ServiceDesc.Streams[0], controlv1.ConfigurationDiscoveryService_StreamConfiguration_FullMethodName)
}

// DialGatewayDelta opens a DeltaStreamConfiguration stream to addr.
func DialGatewayDelta(tb testing.TB, addr string) *GatewayDelta {
	tb.Helper()
	return dialGateway[controlv1.DeltaDiscoveryRequest, controlv1.DeltaDiscoveryResponse](tb, addr,
		&controlv1.DeltaDiscoveryService_ServiceDesc.Streams[0], controlv1.DeltaDiscoveryService_DeltaStreamConfiguration_FullMethodName)
}

func dialGateway[Req, Resp any](tb testing.TB, addr string, desc *grpc.StreamDesc, method string) *GatewayDataPlane[Req, Resp] {
	tb.Helper()
	// A data plane takes snapshots as large as the relay's upstreams may send.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(upstream.MaxRecvMsgSize)))
	if err != nil {
		tb.Fatalf("xdstest: gateway: dial %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cs, err := conn.NewStream(ctx, desc, method)
	if err != nil {
		cancel()
		_ = conn.Close()
		tb.Fatalf("xdstest: gateway: open %s: %v", method, err)
	}
	d := &GatewayDataPlane[Req, Resp]{tb: tb, conn: conn, stream: cs, cancel: cancel, recv: make(chan gatewayResult[Resp], 64), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for {
			resp := new(Resp)
			err := cs.RecvMsg(resp)
			select {
			case d.recv <- gatewayResult[Resp]{resp, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	tb.Cleanup(d.Close)
	return d
}

// Close ends the stream. Idempotent.
func (d *GatewayDataPlane[Req, Resp]) Close() {
	d.cancel()
	<-d.done
	_ = d.conn.Close()
}

// Send sends req.
func (d *GatewayDataPlane[Req, Resp]) Send(req *Req) {
	d.tb.Helper()
	if err := d.stream.SendMsg(req); err != nil {
		d.tb.Fatalf("xdstest: gateway: send: %v", err)
	}
}

// Recv returns the next response or the stream's error, WaitTimeout at most.
func (d *GatewayDataPlane[Req, Resp]) Recv() (*Resp, error) {
	select {
	case r := <-d.recv:
		return r.resp, r.err
	case <-time.After(WaitTimeout):
		return nil, fmt.Errorf("xdstest: gateway: no response within %v", WaitTimeout)
	}
}

// MustRecv returns the next response, failing the test on an error.
func (d *GatewayDataPlane[Req, Resp]) MustRecv() *Resp {
	d.tb.Helper()
	resp, err := d.Recv()
	if err != nil {
		d.tb.Fatalf("xdstest: gateway: receive: %v", err)
	}
	return resp
}

// ExpectNone proves that nothing arrives for dur.
func (d *GatewayDataPlane[Req, Resp]) ExpectNone(dur time.Duration) {
	d.tb.Helper()
	select {
	case r := <-d.recv:
		if r.err != nil {
			d.tb.Fatalf("xdstest: gateway: the stream ended while nothing was expected: %v", r.err)
		}
		d.tb.Fatalf("xdstest: gateway: unexpected response %s", prototext.Format(any(r.resp).(proto.Message)))
	case <-time.After(dur):
	}
}
