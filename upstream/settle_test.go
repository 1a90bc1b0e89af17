package upstream_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/internal/xdstest"
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/upstream"
)

// A wildcard added to a stream that already subscribed by name is proven by
// a response that carries an unnamed resource; when the named resources are
// all there is, no response can prove it, and it settles after the server
// said nothing more — as not found yet (Unfound), never as the full set:
// silence is not the server's word, and the client asks for it on a new
// stream. No update claims the full set unproven.
func TestWildcardAddedMidStream(t *testing.T) {
	for _, mode := range []upstream.Mode{upstream.ModeSotW, upstream.ModeDelta} {
		t.Run(mode.String(), func(t *testing.T) {
			for _, tc := range []struct {
				name     string
				upstream []string
				settled  bool
			}{
				{"proven", []string{"a", "b"}, false},
				{"settled", []string{"a"}, true},
			} {
				t.Run(tc.name, func(t *testing.T) {
					cp := startControlPlane(t, false)
					var rs []types.Resource
					for _, n := range tc.upstream {
						rs = append(rs, cluster(n))
					}
					cp.UpdateResources(keying.ClusterType, rs...)
					rec := &recorder{}
					c := newClient(t, mode, rec, cp.Addr())
					c.Subscribe(keying.ClusterType, "a")
					cur := 0
					if u := rec.nextUpdate(t, &cur, keying.ClusterType); u.Complete {
						t.Fatalf("a named subscription's update claims the full set: %+v", u)
					}
					c.Subscribe(keying.ClusterType, keying.Wildcard)
					for {
						u := rec.nextUpdate(t, &cur, keying.ClusterType)
						settle := u.Event == upstream.Settle
						if settle && (u.Complete || !u.Unfound) {
							t.Fatalf("a settle is not the wildcard's unfound set: %+v", u)
						}
						if !u.Complete && !settle {
							if slices.ContainsFunc(names(u), func(n string) bool { return n != "a" }) {
								t.Fatalf("an unnamed resource did not complete the wildcard: %+v", u)
							}
							continue
						}
						if settle != tc.settled {
							t.Fatalf("the wildcard's update settled=%v, want %v: %+v", settle, tc.settled, u)
						}
						break
					}
					if !tc.settled {
						return
					}
					// The client asks for the server's word on a new stream,
					// whose first request carries "*": its answer is the full
					// set. The connection stays: no disconnection is reported.
					for u := rec.nextUpdate(t, &cur, keying.ClusterType); !u.Complete; u = rec.nextUpdate(t, &cur, keying.ClusterType) {
						if u.Event == upstream.Settle && !u.Unfound {
							continue // the new stream's first answer, settled
						}
					}
					rec.mu.Lock()
					defer rec.mu.Unlock()
					for _, st := range rec.states {
						if !st.connected {
							t.Fatalf("the new stream was reported as a disconnection: %+v", rec.states)
						}
					}
				})
			}
		})
	}
}

// A glob collection subscribed mid-stream on SotW is proven only by a
// member: a response without one may answer the request before. When the
// collection is empty no response can prove it, so once the server said
// nothing more for the settle time a new stream, whose first request
// carries the glob, asks for its set: every response there answers it
// (Update.Globs). It stayed unanswered for good, and a client from
// elsewhere subscribed to it waited for good (oracle seed 320181).
func TestSotWEmptyGlobAddedMidStreamAskedOnANewStream(t *testing.T) {
	const glob = "xdstp://auth/envoy.config.cluster.v3.Cluster/g/*"
	cp := startControlPlane(t, false)
	cp.UpdateResources(keying.ClusterType, cluster("a"))
	rec := &recorder{}
	c := newClient(t, upstream.ModeSotW, rec, cp.Addr())
	c.Subscribe(keying.ClusterType, "a")
	cur := 0
	rec.nextUpdate(t, &cur, keying.ClusterType)
	c.Subscribe(keying.ClusterType, glob)
	for u := rec.nextUpdate(t, &cur, keying.ClusterType); !slices.Contains(u.Globs, glob); u = rec.nextUpdate(t, &cur, keying.ClusterType) {
	}
}

// lateADS is a Delta server that answers every request with cluster "a"
// alone, as a server does that pushed a change of "a" before it read the
// request adding "*".
type lateADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
}

func (lateADS) DeltaAggregatedResources(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	body, err := anypb.New(cluster("a"))
	if err != nil {
		return err
	}
	for nonce := 1; ; nonce++ {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		if len(req.GetResourceNamesSubscribe()) == 0 && len(req.GetResourceNamesUnsubscribe()) == 0 {
			continue // an ACK
		}
		if err := s.Send(&discoveryv3.DeltaDiscoveryResponse{TypeUrl: keying.ClusterType, Nonce: strconv.Itoa(nonce),
			Resources: []*discoveryv3.Resource{{Name: "a", Version: strconv.Itoa(nonce), Resource: body}}}); err != nil {
			return nil
		}
	}
}

// A name dropped from the subscription while the wildcard added to it is
// unproven proves nothing when it arrives: the response may answer a
// request that still named it (it was taken for the wildcard's full set,
// and wildcard clients were told the rest was gone).
func TestWildcardNotProvenByADroppedName(t *testing.T) {
	srv := xdstest.StartUpstream(t, xdstest.WithADS(lateADS{}))
	rec := &recorder{}
	c := newClientCfg(t, upstream.Config{Mode: upstream.ModeDelta, Settle: time.Minute}, rec, srv.Addr())
	c.Subscribe(keying.ClusterType, "a")
	cur := 0
	rec.nextUpdate(t, &cur, keying.ClusterType)
	c.Subscribe(keying.ClusterType, keying.Wildcard)
	c.Unsubscribe(keying.ClusterType, "a")
	if u := rec.nextUpdate(t, &cur, keying.ClusterType); u.Complete {
		t.Fatalf("a response carrying only the name just dropped claims the wildcard's full set: %+v", u)
	}
}

// silentADS reads every request and answers none: on Delta, as a server
// does whose resources all have the versions the relay declared; on SotW,
// as one that lacks the named resources (it says nothing of them).
type silentADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
}

func (silentADS) DeltaAggregatedResources(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return drain(func() error { _, err := s.Recv(); return err })
}

func (silentADS) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return drain(func() error { _, err := s.Recv(); return err })
}

// drain receives until the stream ends.
func drain(recv func() error) error {
	for recv() == nil {
	}
	return nil
}

// A type the server has not answered on a new stream settles after the
// server said nothing, even when a wildcard came and went meanwhile: the end
// of the wildcard's wait is not the end of the type's (the relay's cache of
// the type stayed unconfirmed for good, and clients that came from another
// replica were never answered; oracle seed 4101837).
func TestTypeSettlesAfterAWildcardCameAndWent(t *testing.T) {
	srv := xdstest.StartUpstream(t, xdstest.WithADS(silentADS{}))
	rec := &recorder{}
	c := newClientCfg(t, upstream.Config{Mode: upstream.ModeDelta, Settle: 100 * time.Millisecond}, rec, srv.Addr())
	cur, ucur := 0, 0
	c.Subscribe(keying.ListenerType, "l4")
	srv.NextDelta(t, &cur, keying.ListenerType)
	c.Subscribe(keying.ListenerType, keying.Wildcard)
	srv.NextDelta(t, &cur, keying.ListenerType)
	c.Unsubscribe(keying.ListenerType, keying.Wildcard)
	srv.NextDelta(t, &cur, keying.ListenerType)
	u := rec.nextUpdate(t, &ucur, keying.ListenerType)
	if u.Event != upstream.Settle || u.Complete {
		t.Fatalf("the type's update after the server said nothing: %+v, want settled, not complete", u)
	}
}

// On SotW, a type dropped and subscribed again before the server answered
// it on the stream is asked for again with no version; the server's silence
// proves no wildcard then, but it still ends the wait for the type's first
// answer (found by a review: the wait was lost, the cache stayed
// unconfirmed for good).
func TestSotWTypeSettlesAfterItWasSubscribedAgain(t *testing.T) {
	for _, tc := range []struct {
		name, typeURL, sub string
		again              bool
	}{
		{"named", keying.EndpointType, "e1", false},
		{"named again", keying.EndpointType, "e1", true},
		{"wildcard again", keying.ListenerType, keying.Wildcard, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := xdstest.StartUpstream(t, xdstest.WithADS(silentADS{}))
			rec := &recorder{}
			c := newClientCfg(t, upstream.Config{Mode: upstream.ModeSotW, Settle: 300 * time.Millisecond}, rec, srv.Addr())
			cur, ucur := 0, 0
			c.Subscribe(tc.typeURL, tc.sub)
			srv.NextSotW(t, &cur, tc.typeURL)
			if tc.again {
				c.Unsubscribe(tc.typeURL, tc.sub)
				srv.NextSotW(t, &cur, tc.typeURL)
				c.Subscribe(tc.typeURL, tc.sub)
				srv.NextSotW(t, &cur, tc.typeURL)
			}
			u := rec.nextUpdate(t, &ucur, tc.typeURL)
			if u.Event != upstream.Settle || u.Complete || u.Unfound != (tc.sub == keying.Wildcard && !tc.again) {
				t.Fatalf("the type's update after the server said nothing: %+v", u)
			}
		})
	}
}

// A response the relay NACKs is no answer: the server's silence after it
// (a server sends again only on a change) settles nothing — the wildcard
// was taken for answered, complete and empty, and clients that came from
// another replica were told their clusters were gone. The next valid
// response answers the type.
func TestNACKedAnswerSettlesNothing(t *testing.T) {
	for _, mode := range []upstream.Mode{upstream.ModeSotW, upstream.ModeDelta} {
		t.Run(map[upstream.Mode]string{upstream.ModeSotW: "sotw", upstream.ModeDelta: "delta"}[mode], func(t *testing.T) {
			f := &scriptedADS{sotw: make(chan *discoveryv3.DiscoveryResponse, 4), delta: make(chan *discoveryv3.DeltaDiscoveryResponse, 4)}
			srv := xdstest.StartUpstream(t, xdstest.WithADS(f))
			rec := &recorder{}
			c := newClientCfg(t, upstream.Config{Mode: mode, Settle: 50 * time.Millisecond}, rec, srv.Addr())
			c.Subscribe(keying.ClusterType, keying.Wildcard)
			cur := 0
			bad := rawAny(keying.ClusterType, stringField(1, "")) // a cluster without a name
			good := mustAny(t, cluster("c1"))
			if mode == upstream.ModeSotW {
				srv.NextSotW(t, &cur, keying.ClusterType)
				f.sotw <- &discoveryv3.DiscoveryResponse{TypeUrl: keying.ClusterType, VersionInfo: "1", Nonce: "1", Resources: []*anypb.Any{bad}}
				if req := srv.NextSotW(t, &cur, keying.ClusterType); req.GetErrorDetail() == nil {
					t.Fatalf("the invalid response was not NACKed: %v", req)
				}
			} else {
				srv.NextDelta(t, &cur, keying.ClusterType)
				f.delta <- &discoveryv3.DeltaDiscoveryResponse{TypeUrl: keying.ClusterType, Nonce: "1",
					Resources: []*discoveryv3.Resource{{Name: "c0", Version: "1", Resource: bad}}}
				if req := srv.NextDelta(t, &cur, keying.ClusterType); req.GetErrorDetail() == nil {
					t.Fatalf("the invalid response was not NACKed: %v", req)
				}
			}
			time.Sleep(10 * 50 * time.Millisecond) // ten settle times of silence: proves a non-event
			if n := rec.numUpdates(); n != 0 {
				t.Fatalf("silence after a NACK settled the type: %d updates", n)
			}
			if mode == upstream.ModeSotW {
				f.sotw <- &discoveryv3.DiscoveryResponse{TypeUrl: keying.ClusterType, VersionInfo: "2", Nonce: "2", Resources: []*anypb.Any{good}}
			} else {
				f.delta <- &discoveryv3.DeltaDiscoveryResponse{TypeUrl: keying.ClusterType, Nonce: "2",
					Resources: []*discoveryv3.Resource{{Name: "c1", Version: "2", Resource: good}}}
			}
			ucur := 0
			if u := rec.nextUpdate(t, &ucur, keying.ClusterType); u.Event != upstream.Response || !u.Complete {
				t.Fatalf("the valid answer: %+v, want a response completing the wildcard", u)
			}
		})
	}
}

// A server sends again only on a change after a NACK, so a NACKed response
// that left a set unanswered on the stream — the type's first answer, a
// glob collection's members — is asked for again on a new stream once the
// does-not-exist wait has passed: a relay is a cache for others and must
// not hold a set unanswered for good (the cache of the type stayed
// unconfirmed, and clients from another replica were never answered;
// oracle seed 80823). The next valid response answers it.
func TestNACKedAnswerAskedAgainOnANewStream(t *testing.T) {
	const glob = "xdstp://auth/envoy.config.cluster.v3.Cluster/g/*"
	const member = "xdstp://auth/envoy.config.cluster.v3.Cluster/g/m1"
	for _, tc := range []struct {
		name     string
		mode     upstream.Mode
		sub      string
		midGlob  bool // the glob is subscribed after the type's first answer
		complete bool // the valid answer completes the wildcard
	}{
		{"sotw wildcard", upstream.ModeSotW, keying.Wildcard, false, true},
		{"delta wildcard", upstream.ModeDelta, keying.Wildcard, false, true},
		{"sotw glob", upstream.ModeSotW, glob, false, false},
		{"delta glob", upstream.ModeDelta, glob, false, false},
		{"delta glob mid-stream", upstream.ModeDelta, glob, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &scriptedADS{sotw: make(chan *discoveryv3.DiscoveryResponse, 4), delta: make(chan *discoveryv3.DeltaDiscoveryResponse, 4)}
			srv := xdstest.StartUpstream(t, xdstest.WithADS(f))
			rec := &recorder{}
			reasons := make(chan string, 4)
			c := newClientCfg(t, upstream.Config{Mode: tc.mode, Settle: 50 * time.Millisecond, ResyncAfter: 200 * time.Millisecond,
				OnResync: func(r string) { reasons <- r }}, rec, srv.Addr())
			cur, ucur := 0, 0
			name := "c1"
			if tc.sub == glob {
				name = member
			}
			respond := func(nonce string, r *anypb.Any) {
				if tc.mode == upstream.ModeSotW {
					f.sotw <- &discoveryv3.DiscoveryResponse{TypeUrl: keying.ClusterType, VersionInfo: nonce, Nonce: nonce, Resources: []*anypb.Any{r}}
				} else {
					f.delta <- &discoveryv3.DeltaDiscoveryResponse{TypeUrl: keying.ClusterType, Nonce: nonce,
						Resources: []*discoveryv3.Resource{{Name: name, Version: nonce, Resource: r}}}
				}
			}
			next := func() (nonce string, nack, first bool) {
				if tc.mode == upstream.ModeSotW {
					req := srv.NextSotW(t, &cur, keying.ClusterType)
					return req.GetResponseNonce(), req.GetErrorDetail() != nil, req.GetResponseNonce() == ""
				}
				req := srv.NextDelta(t, &cur, keying.ClusterType)
				return req.GetResponseNonce(), req.GetErrorDetail() != nil, len(req.GetResourceNamesSubscribe()) > 0 && req.GetResponseNonce() == ""
			}
			if tc.midGlob {
				c.Subscribe(keying.ClusterType, "c0")
				next()
				f.delta <- &discoveryv3.DeltaDiscoveryResponse{TypeUrl: keying.ClusterType, Nonce: "0",
					Resources: []*discoveryv3.Resource{{Name: "c0", Version: "0", Resource: mustAny(t, cluster("c0"))}}}
				rec.nextUpdate(t, &ucur, keying.ClusterType)
				next() // ACK
			}
			c.Subscribe(keying.ClusterType, tc.sub)
			next()
			respond("1", rawAny(keying.ClusterType, stringField(1, ""))) // a cluster without a name
			if _, nack, _ := next(); !nack {
				t.Fatal("the invalid response was not NACKed")
			}
			if _, _, first := next(); !first {
				t.Fatal("after the NACK, the next request is not a new stream's first")
			}
			if r := <-reasons; r != upstream.ResyncRejected {
				t.Fatalf("new stream for %q, want %q", r, upstream.ResyncRejected)
			}
			respond("2", mustAny(t, cluster(name)))
			for {
				u := rec.nextUpdate(t, &ucur, keying.ClusterType)
				if u.Event != upstream.Response {
					continue // the new stream's settle, before the answer
				}
				if len(u.Resources) != 1 || u.Resources[0].Name != name || u.Complete != tc.complete {
					t.Fatalf("the valid answer on the new stream: %+v", u)
				}
				break
			}
		})
	}
}
