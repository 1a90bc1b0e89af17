package downstream

import (
	"context"
	"net"
	"testing"
)

// acceptOne dials l and returns the server's and the client's end.
func acceptOne(t *testing.T, l net.Listener) (server, client net.Conn) {
	t.Helper()
	client, err := net.Dial(l.Addr().Network(), l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	if server, err = l.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close() })
	return server, client
}

// Listener hands grpc the accepted *net.TCPConn itself, which grpc reads
// through pooled buffers instead of a 4 KiB bufio.Reader per connection
// (issue 26), and still counts it from its accept to its close.
func TestListenerServesTheRawConn(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{}
	l := s.Listener(lis)
	defer l.Close()

	a, _ := acceptOne(t, l)
	if _, ok := a.(*net.TCPConn); !ok {
		t.Fatalf("Accept returned a %T, want the *net.TCPConn", a)
	}
	b, bClient := acceptOne(t, l)
	if n := s.OpenConns(); n != 2 {
		t.Fatalf("OpenConns() = %d after two accepts, want 2", n)
	}
	_ = a.Close() // as grpc closes a connection it is done with
	if n := s.OpenConns(); n != 1 {
		t.Fatalf("OpenConns() = %d after one was closed, want 1", n)
	}
	_ = bClient.Close() // the client left; b is open until grpc reads the EOF and closes it
	if n := s.OpenConns(); n != 1 {
		t.Fatalf("OpenConns() = %d before the server closed its end, want 1", n)
	}
	_ = b.Close()
	if n := s.OpenConns(); n != 0 {
		t.Fatalf("OpenConns() = %d after both were closed, want 0", n)
	}
}

// Connections closed behind the tracking's back are forgotten as more are
// accepted: it tracks at most twice the open ones (plus pruneSlack).
func TestClosedConnsAreForgotten(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{}
	l := s.Listener(lis)
	defer l.Close()
	acceptOne(t, l) // stays open
	for range 3 * pruneSlack {
		c, client := acceptOne(t, l)
		_ = c.Close()
		_ = client.Close()
	}
	s.conns.mu.Lock()
	tracked := len(s.conns.open)
	s.conns.mu.Unlock()
	if tracked > 2+pruneSlack {
		t.Errorf("%d connections tracked with 1 open, want at most %d", tracked, 2+pruneSlack)
	}
	if n := s.OpenConns(); n != 1 {
		t.Errorf("OpenConns() = %d, want 1", n)
	}
}

// pipeListener accepts the server ends of net.Pipe: connections that are
// not a *net.TCPConn, which Listener wraps.
type pipeListener struct{ conns chan net.Conn }

func (p pipeListener) Accept() (net.Conn, error) { return <-p.conns, nil }
func (p pipeListener) Close() error              { return nil }
func (p pipeListener) Addr() net.Addr            { return &net.TCPAddr{} }

// A connection of another type is wrapped, counted until its Close, and
// closed by Drain like any.
func TestListenerTracksOtherConns(t *testing.T) {
	p := pipeListener{make(chan net.Conn, 2)}
	s := &Server{}
	l := s.Listener(p)
	var clients []net.Conn
	for range 2 {
		server, client := net.Pipe()
		defer client.Close()
		clients = append(clients, client)
		p.conns <- server
	}
	a, _ := l.Accept()
	b, _ := l.Accept()
	if n := s.OpenConns(); n != 2 {
		t.Fatalf("OpenConns() = %d after two accepts, want 2", n)
	}
	_ = a.Close()
	if n := s.OpenConns(); n != 1 {
		t.Fatalf("OpenConns() = %d after one was closed, want 1", n)
	}
	if err := s.Drain(context.Background(), 0); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if _, err := b.Write([]byte{0}); err == nil {
		t.Error("the open connection is writable after Drain, want it closed")
	}
	if n := s.OpenConns(); n != 0 {
		t.Errorf("OpenConns() = %d after Drain, want 0", n)
	}
}
