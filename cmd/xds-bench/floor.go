package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strconv"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/fleet"
)

// The gRPC floor: what grpc-go itself costs to fan one response out to N
// ADS streams. A child process (this program's hidden "grpc-floor" command,
// so that its CPU and memory are measured alone) serves ADS SotW with the
// relay's gRPC server options and the fleet xds-democp serves, each type's
// response encoded once. It reads and decodes every request and answers a
// type's first request on a stream; nothing else (no cache, no per-stream
// versions or nonces, no acknowledgement budget). On POST /change on its
// control endpoint it encodes the CDS response once, with the next cluster
// stamped afresh, and writes those bytes to every stream that asked for
// clusters, like the TCP limit's writer: GOMAXPROCS goroutines in turn.

// floorCommand is the hidden command that runs the floor's server.
const floorCommand = "grpc-floor"

// floorResponse is a response encoded once for every stream; floorCodec
// writes its bytes as they are.
type floorResponse struct{ b []byte }

// floorCodec sends *floorResponse as its bytes and everything else, the
// requests included, through grpc's proto codec.
type floorCodec struct{ proto encoding.CodecV2 }

func (c floorCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*floorResponse); ok {
		return mem.BufferSlice{mem.SliceBuffer(r.b)}, nil
	}
	return c.proto.Marshal(v)
}

func (c floorCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c floorCodec) Name() string { return grpcproto.Name }

// floorOptions are the options of the relay's grpc.Server with the default
// limits (relay.New with config.Default): downstream.ServerOptions (buffers,
// header table), keepalive, streams per connection and message limit. The
// floor's codec replaces the relay's (the later option wins); the relay's
// admission tap and connection tracking (downstream.Server.Listener) are the
// relay's own costs and left out.
func floorOptions() []grpc.ServerOption {
	lim := config.Default().Limits
	return append(downstream.ServerOptions(),
		grpc.ForceServerCodecV2(floorCodec{proto: encoding.GetCodecV2(grpcproto.Name)}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: lim.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 60 * time.Second, Timeout: 20 * time.Second,
			MaxConnectionAge: lim.MaxConnectionAge, MaxConnectionAgeGrace: 30 * time.Second}),
		grpc.MaxConcurrentStreams(uint32(lim.MaxStreamsPerConnection)),
		grpc.MaxRecvMsgSize(lim.MaxRecvMessageBytes),
	)
}

// floorServer serves one fleet's pre-encoded responses. Its methods are safe
// for concurrent use.
type floorServer struct {
	// Set at creation, read-only.
	spec fleet.Spec

	// changeMu serialises changes, so that fan-outs go out in order.
	changeMu sync.Mutex

	// Guarded by mu.
	mu       sync.Mutex
	resp     [len(fleet.Kinds)]*floorResponse
	clusters []*anypb.Any // the current CDS resources
	seq      uint64
	streams  map[*floorStream]struct{}
}

// floorStream is one ADS stream of the floor.
type floorStream struct {
	ss grpc.ServerStream

	// mu serialises sends and guards the fields below.
	mu     sync.Mutex
	asked  [len(fleet.Kinds)]bool // the type's first request was answered
	closed bool                   // the handler returned: no more sends
}

// newFloorServer encodes every type's response of spec, stamped now.
func newFloorServer(spec fleet.Spec) (*floorServer, error) {
	s := &floorServer{spec: spec, streams: map[*floorStream]struct{}{}}
	now := time.Now()
	for _, k := range fleet.Kinds {
		rs := make([]*anypb.Any, spec.Count(k))
		for i := range rs {
			a, err := anypb.New(spec.Resource(k, i, now))
			if err != nil {
				return nil, fmt.Errorf("floor: %w", err)
			}
			rs[i] = a
		}
		if k == fleet.Clusters {
			s.clusters = rs
		}
		r, err := encodeFloor(k, rs, 0)
		if err != nil {
			return nil, err
		}
		s.resp[k] = r
	}
	return s, nil
}

// encodeFloor encodes the SotW response of kind k with version and nonce of
// seq; the version is as long as a content hash, as the relay's are.
func encodeFloor(k fleet.Kind, rs []*anypb.Any, seq uint64) (*floorResponse, error) {
	b, err := proto.Marshal(&discoveryv3.DiscoveryResponse{
		VersionInfo: fmt.Sprintf("%016x", seq), TypeUrl: k.TypeURL(), Nonce: strconv.FormatUint(seq, 10), Resources: rs,
	})
	if err != nil {
		return nil, fmt.Errorf("floor: encode %s: %w", k, err)
	}
	return &floorResponse{b: b}, nil
}

// register serves StreamAggregatedResources on g; Delta is not served.
func (s *floorServer) register(g *grpc.Server) {
	ads := discoveryv3.AggregatedDiscoveryService_ServiceDesc
	g.RegisterService(&grpc.ServiceDesc{ServiceName: ads.ServiceName, Metadata: ads.Metadata, Streams: []grpc.StreamDesc{{
		StreamName: "StreamAggregatedResources", Handler: s.handle, ServerStreams: true, ClientStreams: true,
	}}}, nil)
}

// handle reads and decodes the stream's requests until it ends, answering
// each type's first request.
func (s *floorServer) handle(_ any, ss grpc.ServerStream) error {
	st := &floorStream{ss: ss}
	s.mu.Lock()
	s.streams[st] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.streams, st)
		s.mu.Unlock()
		st.mu.Lock()
		st.closed = true // grpc: no SendMsg once the handler has returned
		st.mu.Unlock()
	}()
	for {
		req := &discoveryv3.DiscoveryRequest{}
		if err := ss.RecvMsg(req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		k, ok := fleet.KindOf(req.GetTypeUrl())
		if !ok {
			continue
		}
		if err := s.answer(st, k); err != nil {
			return err
		}
	}
}

// answer sends the current response of kind k on the stream's first request
// of k; later requests of k are acknowledgements and need nothing.
func (s *floorServer) answer(st *floorStream, k fleet.Kind) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.asked[k] {
		return nil
	}
	st.asked[k] = true
	s.mu.Lock()
	r := s.resp[k]
	s.mu.Unlock()
	return st.ss.SendMsg(r)
}

// change stamps the next cluster with now, encodes the CDS response once and
// writes it to every stream that asked for clusters; it returns the change.
func (s *floorServer) change() (fleet.ChangeJSON, error) {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	now := time.Now()
	s.mu.Lock()
	s.seq++
	i := int((s.seq - 1) % uint64(len(s.clusters)))
	c := fleet.ChangeJSON{Seq: s.seq, Type: fleet.Clusters.String(), Names: []string{s.spec.Name(fleet.Clusters, i)},
		CreatedUnixNano: now.UnixNano()}
	a, err := anypb.New(s.spec.Cluster(i, now))
	if err == nil {
		s.clusters[i] = a
		s.resp[fleet.Clusters], err = encodeFloor(fleet.Clusters, s.clusters, s.seq)
	}
	r := s.resp[fleet.Clusters]
	streams := make([]*floorStream, 0, len(s.streams))
	for st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	if err != nil {
		return c, fmt.Errorf("floor: %w", err)
	}
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for j := w; j < len(streams); j += workers {
				streams[j].sendIfAsked(fleet.Clusters, r)
			}
		})
	}
	wg.Wait()
	return c, nil
}

// sendIfAsked sends r when the stream asked for kind k and is still open; an
// error ends the stream, whose handler sees it.
func (st *floorStream) sendIfAsked(k fleet.Kind, r *floorResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.asked[k] && !st.closed {
		_ = st.ss.SendMsg(r)
	}
}

// controlHandler serves GET /healthz and POST /change (clusters only),
// answering as xds-democp's control endpoint does, and GET
// /debug/pprof/{profile,heap}, to set the floor's profiles beside the relay's.
func (s *floorServer) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.Handle("GET /debug/pprof/heap", pprof.Handler("heap"))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("POST /change", func(w http.ResponseWriter, req *http.Request) {
		if t := req.URL.Query().Get("type"); t != "" && t != fleet.Clusters.String() {
			http.Error(w, "floor: only type=cds", http.StatusBadRequest)
			return
		}
		c, err := s.change()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c)
	})
	return mux
}

// grpcFloor is the hidden "grpc-floor" command: see floorServer. It serves
// until ctx is done.
func grpcFloor(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(floorCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "xDS address")
	control := fs.String("control", "127.0.0.1:0", "control endpoint address")
	clusters := fs.Int("clusters", 100, "clusters in the fleet")
	style := fs.String("style", string(fleet.StyleEnvoy), "fleet style: envoy or grpc")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := serveFloor(ctx, *listen, *control, *clusters, *style); err != nil {
		fmt.Fprintln(stderr, "grpc-floor:", err)
		return 1
	}
	return 0
}

// serveFloor serves the floor's xDS and control endpoints until ctx is done.
func serveFloor(ctx context.Context, listen, control string, clusters int, style string) error {
	st, err := fleet.ParseStyle(style)
	if err != nil {
		return err
	}
	// The fleet xds-democp serves to the bench (startServers).
	spec := fleet.Spec{Listeners: 1, Routes: 1, Clusters: clusters, EndpointsPerCluster: 2, Style: st}
	if err := spec.Validate(); err != nil {
		return err
	}
	s, err := newFloorServer(spec)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	clis, err := net.Listen("tcp", control)
	if err != nil {
		_ = lis.Close()
		return err
	}
	g := grpc.NewServer(floorOptions()...)
	s.register(g)
	hs := &http.Server{Handler: s.controlHandler(), ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 2)
	go func() { errs <- g.Serve(lis) }()
	go func() { errs <- hs.Serve(clis) }()
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errs:
	}
	_ = hs.Close()
	g.Stop()
	return err
}
