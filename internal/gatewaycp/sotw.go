package gatewaycp

import (
	"context"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/gateway/controlv1"
)

type sotwService struct {
	*Server
	controlv1.UnimplementedConfigurationDiscoveryServiceServer
}

func (s sotwService) ReportStatus(_ context.Context, r *controlv1.StatusReport) (*controlv1.StatusAck, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failNext > 0 {
		s.failNext--
		return nil, status.Error(codes.Unavailable, "gatewaycp: reports refused for the test")
	}
	s.reports = append(s.reports, r)
	if len(s.reports) > maxRecorded {
		s.reports = s.reports[len(s.reports)-maxRecorded:]
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return &controlv1.StatusAck{Accepted: true}, nil
}

// StreamConfiguration sends the cluster's snapshot (filtered to the
// subscriptions) whenever its version differs from what the data plane
// holds: its request's version, then what it was sent.
func (s sotwService) StreamConfiguration(stream controlv1.ConfigurationDiscoveryService_StreamConfigurationServer) error {
	st := &sotwStream{member: newMember()}
	reqs, errc := pump(stream.Context(), stream.Recv)
	defer s.track(st)()
	sent, nonce, node := "", 0, ""
	for {
		select {
		case req := <-reqs:
			s.record(Request{Sotw: req})
			if st.clusterName() == "" {
				st.subs, sent, node = req.GetSubscriptions(), req.GetVersion(), req.GetNodeId()
				st.join(req.GetCluster())
			}
		case err := <-errc:
			return err
		case <-st.wake:
		}
		c := s.cluster(st.clusterName())
		if c == nil || c.version == sent {
			continue
		}
		nonce++
		s.recordSent(Sent{NodeID: node, Cluster: st.clusterName(), Version: c.version})
		if err := stream.Send(&controlv1.DiscoveryResponse{Version: c.version, Nonce: strconv.Itoa(nonce), Snapshot: filter(c.snap, st.subs)}); err != nil {
			return err
		}
		sent = c.version
	}
}

// sotwStream is one StreamConfiguration; subs is owned by its handler.
type sotwStream struct {
	member
	subs []string
}
