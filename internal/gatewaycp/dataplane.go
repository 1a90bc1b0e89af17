package gatewaycp

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
)

// WaitTimeout bounds every Must*/Expect* wait of the data plane clients.
const WaitTimeout = 10 * time.Second

// ACK and NACK are the result statuses a data plane sends.
const (
	ACK  = controlv1.DiscoveryResultStatus_DISCOVERY_RESULT_STATUS_ACK
	NACK = controlv1.DiscoveryResultStatus_DISCOVERY_RESULT_STATUS_NACK
)

// DataPlane is a test data plane: one StreamConfiguration or
// DeltaStreamConfiguration stream on its own connection. It sends exactly
// the requests a test asks for and hands over responses one by one. Closed
// when the test ends.
type DataPlane[Req, Resp any] struct {
	tb     testing.TB
	conn   *grpc.ClientConn
	stream grpc.ClientStream
	cancel context.CancelFunc
	recv   chan result[Resp]
	done   chan struct{}
}

type result[Resp any] struct {
	resp *Resp
	err  error
}

// SotW is a StreamConfiguration data plane.
type SotW = DataPlane[controlv1.DiscoveryRequest, controlv1.DiscoveryResponse]

// Delta is a DeltaStreamConfiguration data plane.
type Delta = DataPlane[controlv1.DeltaDiscoveryRequest, controlv1.DeltaDiscoveryResponse]

// DialSotW opens a StreamConfiguration stream to addr.
func DialSotW(tb testing.TB, addr string) *SotW {
	tb.Helper()
	return dial[controlv1.DiscoveryRequest, controlv1.DiscoveryResponse](tb, addr,
		&controlv1.ConfigurationDiscoveryService_ServiceDesc.Streams[0], controlv1.ConfigurationDiscoveryService_StreamConfiguration_FullMethodName)
}

// DialDelta opens a DeltaStreamConfiguration stream to addr.
func DialDelta(tb testing.TB, addr string) *Delta {
	tb.Helper()
	return dial[controlv1.DeltaDiscoveryRequest, controlv1.DeltaDiscoveryResponse](tb, addr,
		&controlv1.DeltaDiscoveryService_ServiceDesc.Streams[0], controlv1.DeltaDiscoveryService_DeltaStreamConfiguration_FullMethodName)
}

func dial[Req, Resp any](tb testing.TB, addr string, desc *grpc.StreamDesc, method string) *DataPlane[Req, Resp] {
	tb.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatalf("gatewaycp: dial %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cs, err := conn.NewStream(ctx, desc, method)
	if err != nil {
		cancel()
		_ = conn.Close()
		tb.Fatalf("gatewaycp: open %s: %v", method, err)
	}
	d := &DataPlane[Req, Resp]{tb: tb, conn: conn, stream: cs, cancel: cancel, recv: make(chan result[Resp], 64), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for {
			resp := new(Resp)
			err := cs.RecvMsg(resp)
			select {
			case d.recv <- result[Resp]{resp, err}:
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
func (d *DataPlane[Req, Resp]) Close() {
	d.cancel()
	<-d.done
	_ = d.conn.Close()
}

// Send sends req.
func (d *DataPlane[Req, Resp]) Send(req *Req) {
	d.tb.Helper()
	if err := d.stream.SendMsg(req); err != nil {
		d.tb.Fatalf("gatewaycp: send: %v", err)
	}
}

// Recv returns the next response or the stream's error, WaitTimeout at most.
func (d *DataPlane[Req, Resp]) Recv() (*Resp, error) {
	select {
	case r := <-d.recv:
		return r.resp, r.err
	case <-time.After(WaitTimeout):
		return nil, fmt.Errorf("gatewaycp: no response within %v", WaitTimeout)
	}
}

// MustRecv returns the next response, failing the test on an error.
func (d *DataPlane[Req, Resp]) MustRecv() *Resp {
	d.tb.Helper()
	resp, err := d.Recv()
	if err != nil {
		d.tb.Fatalf("gatewaycp: receive: %v", err)
	}
	return resp
}

// ExpectNone proves that nothing arrives for dur.
func (d *DataPlane[Req, Resp]) ExpectNone(dur time.Duration) {
	d.tb.Helper()
	select {
	case r := <-d.recv:
		if r.err != nil {
			d.tb.Fatalf("gatewaycp: the stream ended while nothing was expected: %v", r.err)
		}
		d.tb.Fatalf("gatewaycp: unexpected response %s", prototext.Format(any(r.resp).(proto.Message)))
	case <-time.After(dur):
	}
}
