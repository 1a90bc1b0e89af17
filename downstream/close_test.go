package downstream

import (
	"context"
	"testing"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/metadata"

	"github.com/xds-relay/xds-relay/keying"
)

// blockingStream is a grpc.ServerStream whose SendMsg blocks until released,
// as it does on a client that stopped reading.
type blockingStream struct {
	entered, release, returned chan struct{}
}

func (b *blockingStream) SetHeader(metadata.MD) error  { return nil }
func (b *blockingStream) SendHeader(metadata.MD) error { return nil }
func (b *blockingStream) SetTrailer(metadata.MD)       {}
func (b *blockingStream) Context() context.Context     { return context.Background() }
func (b *blockingStream) RecvMsg(any) error            { return context.Canceled }
func (b *blockingStream) SendMsg(any) error {
	close(b.entered)
	<-b.release
	close(b.returned)
	return nil
}

// grpc forbids SendMsg after the handler returned: a stream that ends while
// a send is in flight waits for it, however long it takes (it once gave up
// after 5 s).
func TestCloseWaitsForSendInFlight(t *testing.T) {
	t.Parallel()
	ss := &blockingStream{entered: make(chan struct{}), release: make(chan struct{}), returned: make(chan struct{})}
	st := newFuzzStream(t, false, ss)
	if err := st.handleSotW(&discoverypb.DiscoveryRequest{TypeUrl: keying.ClusterType, ResourceNames: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	go st.flush()
	<-ss.entered
	closed := make(chan struct{})
	go func() {
		st.close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("the stream ended while its send was in flight")
	case <-time.After(5500 * time.Millisecond): // beyond the old 5 s give-up
	}
	close(ss.release)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end after its send returned")
	}
	select {
	case <-ss.returned:
	default:
		t.Fatal("ended before the send returned")
	}
}
