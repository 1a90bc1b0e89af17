package gatewaycp

import (
	"slices"
	"strconv"

	"github.com/xds-relay/xds-relay/gateway/controlv1"
)

type deltaService struct {
	*Server
	controlv1.UnimplementedDeltaDiscoveryServiceServer
}

// deltaStream is one Delta stream; has and answered are owned by its
// handler goroutine.
type deltaStream struct {
	member
	has      map[string]map[string]string // type URL → name → version held
	answered map[string]bool
}

// DeltaStreamConfiguration sends, per subscribed type, the resources whose
// version the data plane does not hold and the removals — all of the type
// with non_incremental when more than half of it changed — honouring
// initial_resource_versions. The first answer of a type is sent even when
// empty.
func (s deltaService) DeltaStreamConfiguration(stream controlv1.DeltaDiscoveryService_DeltaStreamConfigurationServer) error {
	st := &deltaStream{member: newMember(), has: make(map[string]map[string]string), answered: make(map[string]bool)}
	reqs, errc := pump(stream.Context(), stream.Recv)
	defer s.track(st)()
	nonce, node := 0, ""
	for {
		select {
		case req := <-reqs:
			s.record(Request{Delta: req})
			st.join(req.GetCluster())
			if node == "" {
				node = req.GetNodeId()
			}
			initial := initialVersions(req.GetInitialResourceVersions())
			for _, t := range req.GetResourceNamesSubscribe() {
				if _, ok := st.has[t]; !ok {
					st.has[t] = initial[t]
					if st.has[t] == nil {
						st.has[t] = make(map[string]string)
					}
				}
			}
			for _, t := range req.GetResourceNamesUnsubscribe() {
				delete(st.has, t)
				delete(st.answered, t)
			}
		case err := <-errc:
			return err
		case <-st.wake:
		}
		c := s.cluster(st.clusterName())
		if c == nil {
			continue
		}
		for _, t := range controlv1.ResourceTypes {
			has, ok := st.has[t]
			if !ok {
				continue
			}
			resp := diff(t, c, has)
			if resp == nil && st.answered[t] {
				continue
			}
			if resp == nil {
				resp = &controlv1.DeltaDiscoveryResponse{TypeUrl: t}
			}
			nonce++
			resp.Nonce, resp.SystemVersionInfo = strconv.Itoa(nonce), c.version
			s.recordSent(Sent{NodeID: node, Cluster: st.clusterName(), Version: c.version, TypeURL: t})
			if err := stream.Send(resp); err != nil {
				return err
			}
			st.answered[t] = true
		}
	}
}

// diff returns the response that brings has to c's resources of typeURL
// (updating has), or nil when has is current.
func diff(typeURL string, c *cluster, has map[string]string) *controlv1.DeltaDiscoveryResponse {
	cur := c.resources[typeURL]
	var changed []*controlv1.Resource
	var removed []string
	for _, n := range sortedKeys(cur) {
		if has[n] != cur[n].version {
			changed = append(changed, cur[n].msg)
		}
	}
	for _, n := range sortedKeys(has) {
		if _, ok := cur[n]; !ok {
			removed = append(removed, n)
		}
	}
	if len(changed) == 0 && len(removed) == 0 {
		return nil
	}
	resp := &controlv1.DeltaDiscoveryResponse{TypeUrl: typeURL, Resources: changed, RemovedResources: removed}
	if len(has) > 0 && 2*(len(changed)+len(removed)) > max(len(cur), 1) {
		// More than half changed: the whole type, replacing what is held.
		resp = &controlv1.DeltaDiscoveryResponse{TypeUrl: typeURL, NonIncremental: true}
		for _, n := range sortedKeys(cur) {
			resp.Resources = append(resp.Resources, cur[n].msg)
		}
	}
	clear(has)
	for n, r := range cur {
		has[n] = r.version
	}
	return resp
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
