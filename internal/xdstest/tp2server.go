package xdstest

import (
	"net"
	"sync"
	"testing"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/internal/tp2"
)

// TP2Server is a tp2.Server (an authoritative ADS server speaking xRFC TP2
// dynamic parameters, which go-control-plane ignores) on 127.0.0.1:0 for a
// test: its changes fail the test instead of returning errors.
type TP2Server struct {
	*tp2.Server
	tb       testing.TB
	addr     string
	srv      *grpc.Server
	done     chan struct{} // closed when Serve returns
	stopOnce sync.Once
}

// VariantRef names one variant of a resource (see tp2.Ref).
type VariantRef = tp2.Ref

// TP2Variant is one variant of a resource with its content (see tp2.Variant).
type TP2Variant = tp2.Variant

// StartTP2 starts a TP2Server on 127.0.0.1:0 serving ADS (SotW and Delta). It
// is stopped when the test ends.
func StartTP2(tb testing.TB) *TP2Server {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("xdstest: tp2 listen: %v", err)
	}
	s := &TP2Server{
		Server: tp2.New(),
		tb:     tb,
		addr:   lis.Addr().String(),
		srv:    grpc.NewServer(grpc.WaitForHandlers(true)),
		done:   make(chan struct{}),
	}
	s.Register(s.srv)
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(lis)
	}()
	tb.Cleanup(s.Stop)
	return s
}

// Addr is the server's host:port.
func (s *TP2Server) Addr() string { return s.addr }

// Stop ends every stream and stops the server; later calls do nothing.
func (s *TP2Server) Stop() {
	s.stopOnce.Do(func() {
		s.srv.Stop()
		<-s.done
	})
}

// Set adds or replaces one variant (tp2.Server.Set).
func (s *TP2Server) Set(typeURL, name string, c *discoverypb.DynamicParameterConstraints, res proto.Message) {
	s.tb.Helper()
	if err := s.Server.Set(typeURL, name, c, res); err != nil {
		s.tb.Fatalf("xdstest: %v", err)
	}
}

// Delete removes one variant (tp2.Server.Delete).
func (s *TP2Server) Delete(typeURL, name string, c *discoverypb.DynamicParameterConstraints) {
	s.tb.Helper()
	if err := s.Server.Delete(typeURL, name, c); err != nil {
		s.tb.Fatalf("xdstest: %v", err)
	}
}

// Apply applies deletes and sets atomically (tp2.Server.Apply).
func (s *TP2Server) Apply(typeURL string, deletes []VariantRef, sets []TP2Variant) {
	s.tb.Helper()
	if err := s.Server.Apply(typeURL, deletes, sets); err != nil {
		s.tb.Fatalf("xdstest: %v", err)
	}
}
