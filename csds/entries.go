package csds

import (
	"slices"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/xds-relay/xds-relay/authz"
	"github.com/xds-relay/xds-relay/downstream"
	"github.com/xds-relay/xds-relay/keying"
)

// DefaultMaxContentBytes bounds the resource contents (xds_config) of one
// answer: under grpc-go's default 4 MiB receive limit, with room for the
// rest of the response.
const DefaultMaxContentBytes = 3 << 20

// reader is one request's reading of client states: who asks, and the
// contents budget left.
type reader struct {
	s        *Server
	p        *authz.Principal
	contents bool // xds_config wanted (no exclude_resource_contents)
	budget   int  // bytes of contents left
	cut      bool // some contents were left out for the budget
}

// allowed reports whether the caller could subscribe to name itself.
func (rd *reader) allowed(typeURL, name string) bool {
	az := rd.s.opts.Authorize
	return az == nil || az(rd.p, typeURL, name) == nil
}

// configs reports one stream's resources, one entry per resource the client
// holds or asks for by name (never the wildcard: a wildcard client lists
// each resource it holds), those the caller could subscribe to itself.
func (rd *reader) configs(st downstream.ClientState) []*statusv3.ClientConfig_GenericXdsConfig {
	var out []*statusv3.ClientConfig_GenericXdsConfig
	for typeURL, ts := range st.Types {
		for _, n := range entryNames(ts) {
			if rd.allowed(typeURL, n) {
				out = append(out, rd.entry(typeURL, n, ts))
			}
		}
	}
	return out
}

// entryNames returns the names a type's entries report: what the client
// holds, asks for by name, or was sent and has not ACKed; never a wildcard or
// a glob.
func entryNames(ts downstream.ClientTypeState) []string {
	names := make([]string, 0, len(ts.Holds)+len(ts.Names))
	for n := range ts.Holds {
		names = append(names, n)
	}
	for n := range ts.Unacked {
		names = append(names, n)
	}
	for _, n := range ts.Names {
		if n != keying.Wildcard && !keying.IsGlob(n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// entry is the client's state of one resource: the version it holds, and
// SYNCED (its latest response of the type ACKed), STALE (a newer response
// not answered yet: ACKED at the version held, REQUESTED when it holds
// none), ERROR (it rejects the type's latest response: the
// reason and the rejected version in error_state) or NOT_SENT (it holds
// none: REQUESTED, or DOES_NOT_EXIST once answered that there is none).
//
// last_updated is when the type's state last changed on the stream (a
// response sent, an ACK, a NACK), and present but zero (the Unix epoch)
// before anything happened: grpcdebug reads the field without a nil check
// (its "xds status" crashed on an entry without it) and shows a zero time as
// blank.
func (rd *reader) entry(typeURL, name string, ts downstream.ClientTypeState) *statusv3.ClientConfig_GenericXdsConfig {
	e := &statusv3.ClientConfig_GenericXdsConfig{TypeUrl: typeURL, Name: name, LastUpdated: &timestamppb.Timestamp{}}
	if !ts.Updated.IsZero() {
		e.LastUpdated = timestamppb.New(ts.Updated)
	}
	h, held := ts.Holds[name]
	sent, inFlight := ts.Unacked[name]
	switch {
	case ts.Rejecting && (held || inFlight):
		e.ConfigStatus, e.ClientStatus = statusv3.ConfigStatus_ERROR, adminv3.ClientResourceStatus_NACKED
		if !inFlight && ts.Unacked == nil {
			sent = h.Version // Delta: what was sent is recorded as held
		}
		e.ErrorState = &adminv3.UpdateFailureState{Details: ts.LastNACK, VersionInfo: sent}
	case !held && inFlight:
		e.ConfigStatus, e.ClientStatus = statusv3.ConfigStatus_STALE, adminv3.ClientResourceStatus_REQUESTED
	case !held && ts.Gone[name]:
		e.ConfigStatus, e.ClientStatus = statusv3.ConfigStatus_NOT_SENT, adminv3.ClientResourceStatus_DOES_NOT_EXIST
	case !held:
		e.ConfigStatus, e.ClientStatus = statusv3.ConfigStatus_NOT_SENT, adminv3.ClientResourceStatus_REQUESTED
	case ts.AckedVersion == ts.SentVersion:
		e.ConfigStatus, e.ClientStatus = statusv3.ConfigStatus_SYNCED, adminv3.ClientResourceStatus_ACKED
	default:
		e.ConfigStatus, e.ClientStatus = statusv3.ConfigStatus_STALE, adminv3.ClientResourceStatus_ACKED // an earlier version
	}
	if held {
		e.VersionInfo = h.Version
		e.XdsConfig = rd.content(h.Any)
	}
	return e
}

// content returns the resource as the client received it, nil when not
// asked for, unreadable, or over the answer's budget.
func (rd *reader) content(b []byte) *anypb.Any {
	if !rd.contents || b == nil {
		return nil
	}
	if len(b) > rd.budget {
		rd.cut = true
		return nil
	}
	a := &anypb.Any{}
	if err := proto.Unmarshal(b, a); err != nil {
		return nil
	}
	rd.budget -= len(b)
	return a
}
