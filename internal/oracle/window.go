package oracle

import (
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// sentLocked records that relay scope node was sent the state of typeURL
// at snapshot index on its stream of authority auth. Called with u.mu held.
func (u *Upstream) sentLocked(node, auth, typeURL string, index int) {
	sc := streamScope{node, auth}
	if u.sent[sc] == nil {
		u.sent[sc] = map[string]*window{}
	}
	if w := u.sent[sc][typeURL]; w == nil {
		u.sent[sc][typeURL] = &window{first: index, low: index, high: index, auth: auth}
	} else {
		w.high = max(w.high, index)
	}
}

// ackedIndexLocked records that relay scope node applied the state of
// typeURL at snapshot index on its stream of authority auth. Called with
// u.mu held.
func (u *Upstream) ackedIndexLocked(node, auth, typeURL string, index int) {
	if w := u.sent[streamScope{node, auth}][typeURL]; w != nil {
		w.low = max(w.low, index)
	}
}

// toldLocked records when relay scope node first acknowledged (ACK, not
// NACK) a response carrying each of keys ("type name", toldKeys): only then
// has the relay certainly applied it. A response merely queued may still be
// on its way (behind a large one) or lost with the connection, and a NACKed
// one is no answer. It also records, as the last time the relay was told,
// when that response was sent: the relay applied it no earlier, and its
// acknowledgement may be read much later. Called with u.mu held.
func (u *Upstream) toldLocked(node string, keys []string, sent time.Time) {
	if len(keys) == 0 {
		return
	}
	inst := instanceOf(node)
	if u.told[inst] == nil {
		u.told[inst] = map[string]toldTimes{}
	}
	now := time.Now()
	for _, k := range keys {
		tt, ok := u.told[inst][k]
		if !ok {
			tt.first = now
		}
		if sent.After(tt.last) {
			tt.last = sent
		}
		u.told[inst][k] = tt
	}
}

// toldTimes is when a relay instance first acknowledged a response carrying
// a name, and when the last one it acknowledged was sent (since it last
// unsubscribed it: untoldLocked).
type toldTimes struct{ first, last time.Time }

// untoldLocked forgets that relay scope node was told names of typeURL: it
// unsubscribed them upstream, and may evict them from its cache since (the
// LRU of unreferenced resources), so that, subscribed again, the upstream's
// silence may answer "not found yet" like that of a name never heard of.
// Keyed by instance, as told is: one scope's unsubscription forgets what
// another may still hold, which only loosens notFoundYet. Called with u.mu
// held.
func (u *Upstream) untoldLocked(node, typeURL string, names []string) {
	for _, n := range names {
		delete(u.told[instanceOf(node)], typeURL+" "+n)
	}
}

// toldKeys returns "type name" of each resource resp carries.
func toldKeys(resp proto.Message) []string {
	var out []string
	switch m := resp.(type) {
	case *discoverypb.DiscoveryResponse:
		for _, a := range m.GetResources() {
			if it, err := decodeAny(m.GetTypeUrl(), a.GetValue(), a.GetTypeUrl()); err == nil && !it.beat {
				out = append(out, m.GetTypeUrl()+" "+it.name)
			}
		}
	case *discoverypb.DeltaDiscoveryResponse:
		for _, w := range m.GetResources() {
			if it := fromWrapper(w); !it.beat {
				out = append(out, m.GetTypeUrl()+" "+it.name)
			}
		}
	}
	return out
}

// ToldAt returns when relay instance first acknowledged a response that
// carried name of typeURL, and whether it did.
func (u *Upstream) ToldAt(instance, typeURL, name string) (time.Time, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	tt, ok := u.told[instance][typeURL+" "+name]
	return tt.first, ok
}

// toldTimesOf returns when relay instance was told of name of typeURL
// (toldTimes), and whether it was.
func (u *Upstream) toldTimesOf(instance, typeURL, name string) (toldTimes, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	tt, ok := u.told[instance][typeURL+" "+name]
	return tt, ok
}
