package csds

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/internal/tlsconfig"
	"github.com/xds-relay/xds-relay/keying"
)

// ClientConfigType is the type URL a CSDS caller is authorized for (with the
// name "*"): an authorization rule whose types list "ClientConfig" lets it
// read the fleet's status.
const ClientConfigType = "type.googleapis.com/envoy.service.status.v3.ClientConfig"

// Paging metadata: a FetchClientStatus answer cut at MaxClients carries
// NextPageHeader (response header); the caller asks for the next page by
// sending it back as PageTokenHeader (request metadata).
const (
	PageTokenHeader = "xds-relay-page-token"
	NextPageHeader  = "xds-relay-next-page-token"
	// TotalHeader is the number of clients that matched, on every
	// FetchClientStatus answer.
	TotalHeader = "xds-relay-matched-clients"
	// ContentsCutHeader is "true" on a FetchClientStatus answer whose
	// entries carry no xds_config past MaxContentBytes.
	ContentsCutHeader = "xds-relay-contents-cut"
)

// DefaultMaxClients bounds the ClientConfigs of one answer.
const DefaultMaxClients = 1000

// Snapshot is the read-only view of the downstream server CSDS reports:
// implemented by *downstream.Server.
type Snapshot interface {
	Refs() []downstream.StreamRef
	ClientStates(ids []uint64) []downstream.ClientState
}

// Options configure a Server.
type Options struct {
	// Authorize, when set, decides who may read CSDS (ClientConfigType, "*")
	// and which entries it sees (those it could subscribe to itself).
	Authorize authz.Authorizer
	// MaxClients bounds the ClientConfigs of one answer. Default 1000.
	MaxClients int
	// MaxContentBytes bounds the resource contents (xds_config) of one
	// answer; entries past it carry none, and FetchClientStatus says so in
	// the ContentsCutHeader response header. Default 3 MiB.
	MaxContentBytes int
	Logger          *zap.Logger
}

// Server serves envoy.service.status.v3.ClientStatusDiscoveryService.
type Server struct {
	statusv3.UnimplementedClientStatusDiscoveryServiceServer

	// set at creation, read-only
	snap Snapshot
	opts Options
	log  *zap.Logger
}

// New returns a CSDS server reporting snap.
func New(snap Snapshot, opts Options) *Server {
	if opts.MaxClients <= 0 {
		opts.MaxClients = DefaultMaxClients
	}
	if opts.MaxContentBytes <= 0 {
		opts.MaxContentBytes = DefaultMaxContentBytes
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Server{snap: snap, opts: opts, log: opts.Logger}
}

// Register adds the service to g.
func (s *Server) Register(g *grpc.Server) { statusv3.RegisterClientStatusDiscoveryServiceServer(g, s) }

// FetchClientStatus answers one request: up to MaxClients clients from the
// page token on, with the next token in the header when cut.
func (s *Server) FetchClientStatus(ctx context.Context, req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	after := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(PageTokenHeader); len(v) > 0 {
			b, err := base64.RawURLEncoding.DecodeString(v[0])
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "xds-relay: malformed %s", PageTokenHeader)
			}
			after = string(b)
		}
	}
	resp, total, next, cut, err := s.answer(ctx, req, after)
	if err != nil {
		return nil, err
	}
	hdr := metadata.Pairs(TotalHeader, strconv.Itoa(total))
	if cut {
		hdr.Set(ContentsCutHeader, "true")
	}
	if next != "" {
		hdr.Set(NextPageHeader, base64.RawURLEncoding.EncodeToString([]byte(next)))
	}
	_ = grpc.SetHeader(ctx, hdr)
	return resp, nil
}

// StreamClientStatus answers every request of the stream as FetchClientStatus
// does its first page.
func (s *Server) StreamClientStatus(stream statusv3.ClientStatusDiscoveryService_StreamClientStatusServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, _, _, _, err := s.answer(stream.Context(), req, "")
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// client is one xDS client: the streams of one node id from one peer (an
// Envoy's per-type streams share its connection; ADS is one stream).
type client struct {
	key  string // node id, NUL, peer: the sort and paging key
	node *corev3.Node
	ids  []uint64
}

// answer builds the response for req: the matching clients sorted by node
// id and peer, those after the key after, at most MaxClients. It returns
// how many matched, the key to continue after ("" on the last page) and
// whether contents were cut for the budget.
func (s *Server) answer(ctx context.Context, req *statusv3.ClientStatusRequest, after string) (*statusv3.ClientStatusResponse, int, string, bool, error) {
	p := &authz.Principal{NodeID: req.GetNode().GetId(), Cluster: req.GetNode().GetCluster()}
	p.SPIFFEID, p.URISANs, p.MTLS = tlsconfig.PeerIdentity(ctx)
	if az := s.opts.Authorize; az != nil {
		if err := az(p, ClientConfigType, keying.Wildcard); err != nil {
			s.log.Info("CSDS refused", zap.String("node", p.NodeID), zap.Error(err))
			return nil, 0, "", false, status.Errorf(codes.PermissionDenied, "xds-relay: not allowed to read client status: %v", err)
		}
	}
	ms, err := compileNodeMatchers(req.GetNodeMatchers())
	if err != nil {
		return nil, 0, "", false, status.Errorf(codes.InvalidArgument, "xds-relay: %v", err)
	}
	byKey := make(map[string]*client)
	for _, ref := range s.snap.Refs() {
		node := ref.Node
		if node == nil {
			node = &corev3.Node{}
		}
		if !matchAny(ms, node) {
			continue
		}
		k := node.GetId() + "\x00" + ref.Peer
		c := byKey[k]
		if c == nil {
			c = &client{key: k, node: node}
			byKey[k] = c
		}
		c.ids = append(c.ids, ref.ID)
	}
	clients := make([]*client, 0, len(byKey))
	for _, c := range byKey {
		if c.key > after {
			clients = append(clients, c)
		}
	}
	slices.SortFunc(clients, func(a, b *client) int { return strings.Compare(a.key, b.key) })
	next := ""
	if len(clients) > s.opts.MaxClients {
		clients = clients[:s.opts.MaxClients]
		next = clients[len(clients)-1].key
	}
	var ids []uint64
	for _, c := range clients {
		ids = append(ids, c.ids...)
	}
	states := make(map[uint64]downstream.ClientState, len(ids))
	for _, st := range s.snap.ClientStates(ids) {
		states[st.ID] = st
	}
	rd := &reader{s: s, p: p, contents: !req.GetExcludeResourceContents(), budget: s.opts.MaxContentBytes}
	resp := &statusv3.ClientStatusResponse{}
	for _, c := range clients {
		// client_scope is the node id: grpcdebug's --scope selects a client by it.
		cc := &statusv3.ClientConfig{Node: c.node, ClientScope: c.node.GetId()}
		for _, id := range c.ids {
			st, ok := states[id]
			if !ok {
				continue // the stream ended meanwhile
			}
			cc.GenericXdsConfigs = append(cc.GenericXdsConfigs, rd.configs(st)...)
		}
		slices.SortFunc(cc.GenericXdsConfigs, func(a, b *statusv3.ClientConfig_GenericXdsConfig) int {
			if c := strings.Compare(a.GetTypeUrl(), b.GetTypeUrl()); c != 0 {
				return c
			}
			return strings.Compare(a.GetName(), b.GetName())
		})
		resp.Config = append(resp.Config, cc)
	}
	return resp, len(byKey), next, rd.cut, nil
}
