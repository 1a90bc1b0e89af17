package downstream

import (
	"fmt"
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
	st := &stream{types: map[string]*typeState{v.TypeURL: {wildcard: true, names: map[string]struct{}{}}}}
	it := item{view: v, names: map[string]struct{}{"cluster-0001": {}}}
	b.ReportAllocs()
	for b.Loop() {
		st.types[v.TypeURL].sentVersion = ""
		if st.buildSotW(it) == nil {
			b.Fatal("no response")
		}
	}
}
