package downstream

import (
	"hash/maphash"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
)

// nodeTable shares one decoded Node among the streams that present the
// same one (the streams of one connection, mostly): each stream keeps its
// node for life, and a decoded Node with its strings is a few hundred
// bytes. Shared nodes are read-only. Safe for concurrent use.
type nodeTable struct {
	seed maphash.Seed

	mu sync.Mutex
	m  map[uint64]*sharedNode // guarded by mu; by the hash of the node's deterministic encoding
}

type sharedNode struct {
	node *corev3.Node
	refs int
}

// intern returns the shared node equal to n (n itself when it is the first)
// and the key release takes; key 0 means n is not shared.
func (t *nodeTable) intern(n *corev3.Node) (*corev3.Node, uint64) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(n)
	if err != nil {
		return n, 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.seed = maphash.MakeSeed()
		t.m = make(map[uint64]*sharedNode)
	}
	key := maphash.Bytes(t.seed, b) | 1 // never 0
	switch e := t.m[key]; {
	case e == nil:
		t.m[key] = &sharedNode{node: n, refs: 1}
		return n, key
	case proto.Equal(e.node, n):
		e.refs++
		return e.node, key
	}
	return n, 0 // another node with the same hash: not shared
}

// release drops a reference intern returned.
func (t *nodeTable) release(key uint64) {
	if key == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.m[key]; e != nil {
		if e.refs--; e.refs == 0 {
			delete(t.m, key)
		}
	}
}
