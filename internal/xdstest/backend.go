package xdstest

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
)

// BackendHeader is the response header in which a Backend names itself.
const BackendHeader = "x-backend"

// EchoMethod is a method name tests may call on a Backend; any other works
// too.
const EchoMethod = "/xdsrelay.test.Echo/Call"

// Backend is a gRPC server on 127.0.0.1 that answers every method
// (grpc.UnknownServiceHandler): it reads one request message, whatever its
// contents, and answers with an empty message and the response header
// "x-backend: <id>", so a test sees which backend served a call.
type Backend struct {
	// Set at creation, read-only.
	id   string
	addr string
	srv  *grpc.Server
	done chan struct{} // closed when Serve returns

	calls atomic.Int64
}

// StartBackend starts a Backend named id on 127.0.0.1:0. It is stopped when
// the test ends.
func StartBackend(tb testing.TB, id string) *Backend {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("xdstest: backend %s listen: %v", id, err)
	}
	b := &Backend{id: id, addr: lis.Addr().String(), done: make(chan struct{})}
	b.srv = grpc.NewServer(grpc.UnknownServiceHandler(b.handle))
	go func() {
		defer close(b.done)
		// Serve returns nil after Stop; any other error ends the backend and
		// shows up as failed calls in the test.
		_ = b.srv.Serve(lis)
	}()
	tb.Cleanup(b.Stop)
	return b
}

// ID is the name the backend puts in its x-backend header.
func (b *Backend) ID() string { return b.id }

// Addr is the backend's host:port.
func (b *Backend) Addr() string { return b.addr }

// Calls counts the calls served.
func (b *Backend) Calls() int64 { return b.calls.Load() }

// Stop stops the backend and waits until it has stopped. Idempotent.
func (b *Backend) Stop() {
	b.srv.Stop()
	<-b.done
}

func (b *Backend) handle(_ any, stream grpc.ServerStream) error {
	b.calls.Add(1)
	if err := stream.SetHeader(metadata.Pairs(BackendHeader, b.id)); err != nil {
		return err
	}
	// emptypb.Empty keeps any request bytes as unknown fields: every
	// well-formed protobuf, and the empty message, decodes.
	var req emptypb.Empty
	if err := stream.RecvMsg(&req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return stream.SendMsg(&emptypb.Empty{})
}
