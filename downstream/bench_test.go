package downstream

import (
	"fmt"
	"maps"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// benchView is a CDS-like View of n resources of ~95 bytes each.
func benchView(n int) *View {
	v := &View{TypeURL: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Seq: 1,
		Resources: make(map[string]*Resource, n), Complete: true}
	for i := range n {
		a, _ := anypb.New(wrapperspb.String(fmt.Sprintf("cluster-%04d-%080d", i, i)))
		b, _ := proto.Marshal(a)
		name := fmt.Sprintf("cluster-%04d", i)
		v.Resources[name] = &Resource{Name: name, Version: ResourceVersion(b), Any: b}
	}
	return v
}

// The encode path: one full-state response of 100 resources, built from the
// pre-encoded resources.
func BenchmarkEncodeSotW100(b *testing.B) {
	v := benchView(100)
	rs := v.wildcard()
	b.ReportAllocs()
	for b.Loop() {
		encodeSotW(v.TypeURL, rs, nil, wrap{})
	}
}

// What each further stream pays for the same response: a memo hit and its
// nonce.
func BenchmarkSharedResponsePerStream(b *testing.B) {
	v := benchView(100)
	v.sotw("*", v.wildcard, nil, wrap{})
	b.ReportAllocs()
	for b.Loop() {
		body := v.sotw("*", v.wildcard, nil, wrap{})
		_ = newEncoded(body.bytes, sotwNonce, "12345")
	}
}

// A wildcard stream's whole per-change work under its lock: pick, memo,
// nonce, bookkeeping.
func BenchmarkBuildSotWWildcard(b *testing.B) {
	v := benchView(100)
	st := &stream{types: map[string]*typeState{v.TypeURL: {subscription: subscription{wildcard: true, names: map[string]struct{}{}}}}}
	it := item{view: v, names: map[string]struct{}{"cluster-0001": {}}}
	b.ReportAllocs()
	for b.Loop() {
		st.types[v.TypeURL].sentVersion = ""
		if st.buildSotW(it) == nil {
			b.Fatal("no response")
		}
	}
}

// The per-stream build of one change for a fleet of streams that share a
// subscription: wildcard (Envoy-like) or the same 100 names (proxyless
// gRPC). Each iteration is one stream's build of a fresh change; the View
// is replaced every `fleet` builds, as a change reaches each stream once.
func BenchmarkBuildSotWFleet(b *testing.B) {
	const fleet = 1000
	for _, shape := range []string{"wildcard", "named"} {
		b.Run(shape, func(b *testing.B) {
			v := benchView(100)
			var sets nameSets
			streams := make([]*stream, fleet)
			for i := range streams {
				ts := &typeState{subscription: subscription{names: map[string]struct{}{}}}
				if shape == "wildcard" {
					ts.wildcard = true
				} else {
					want := make(map[string]struct{}, len(v.Resources))
					for n := range v.Resources {
						want[n] = struct{}{}
					}
					ts.names = sets.intern(&ts.set, want)
				}
				streams[i] = &stream{types: map[string]*typeState{v.TypeURL: ts}, typeURL: v.TypeURL}
			}
			seq := uint64(1)
			it := item{view: v, names: map[string]struct{}{"cluster-0001": {}}}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i%fleet == 0 {
					seq++
					nv := v.Next(seq, it.names)
					res := maps.Clone(v.Resources)
					old := res["cluster-0001"]
					res["cluster-0001"] = &Resource{Name: old.Name, Version: fmt.Sprint(seq), Any: old.Any}
					nv.Resources = res
					v = nv
					it.view = v
				}
				if streams[i%fleet].buildSotW(it) == nil {
					b.Fatal("no response")
				}
				i++
			}
		})
	}
}
