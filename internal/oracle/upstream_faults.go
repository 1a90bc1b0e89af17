package oracle

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/keying"
)

// faults are the upstream's misbehaviours a schedule asks for: silences
// (Dims.Silence) and invalid responses (Dims.Invalid). Guarded by
// Upstream.mu.
type faults struct {
	// mute holds the silenced types ("" for every type): their responses
	// are withheld until the type speaks again.
	mute map[string]bool
	// timers end the timed silences.
	timers []*time.Timer
	// corrupt counts, by type, the next responses to make invalid.
	corrupt map[string]int
	// strict: after a NACK, send again only on a change (the relay NACKs
	// only invalid responses).
	strict bool
	// listForeign: the wildcard answer lists another authority's names too
	// (Dims.Foreign).
	listForeign bool
}

func (u *Upstream) listsForeign() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.listForeign
}

// queued is a response withheld by a silence.
type queued struct {
	m              proto.Message
	typeURL, nonce string
	index          int
}

// queueLocked queues a response, or withholds it while its type is
// silenced. Called with s.mu held.
func (s *ustream) queueLocked(m proto.Message, typeURL, nonce string, index int) {
	if s.u.muted(typeURL) {
		s.withheld = append(s.withheld, queued{m, typeURL, nonce, index})
		return
	}
	s.releaseLocked(m, typeURL, nonce, index)
}

// outLocked hands m to the sender. Called with s.mu held.
func (s *ustream) outLocked(m proto.Message) {
	s.out = append(s.out, m)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (u *Upstream) muted(typeURL string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.mute[""] || u.mute[typeURL]
}

// silence withholds the responses of typeURL ("" for every type) for d, or
// until speak when d is 0.
func (u *Upstream) silence(typeURL string, d time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.mute == nil {
		u.mute = map[string]bool{}
	}
	u.mute[typeURL] = true
	if d > 0 {
		u.timers = append(u.timers, time.AfterFunc(d, func() { u.speak(typeURL) }))
	}
}

// speak ends the silence of typeURL ("" for every type; with all, every
// fault ends: timed silences and invalid responses still to come): the
// withheld responses go out in order.
func (u *Upstream) speak(typeURL string, all ...bool) {
	u.mu.Lock()
	delete(u.mute, typeURL)
	if len(all) > 0 {
		u.mute, u.corrupt = nil, nil
		for _, t := range u.timers {
			t.Stop()
		}
		u.timers = nil
	}
	streams := make([]*ustream, 0, len(u.streams))
	for s := range u.streams {
		streams = append(streams, s)
	}
	u.mu.Unlock()
	for _, s := range streams {
		s.mu.Lock()
		var still []queued
		for _, q := range s.withheld {
			if u.muted(q.typeURL) {
				still = append(still, q)
				continue
			}
			s.releaseLocked(q.m, q.typeURL, q.nonce, q.index)
		}
		s.withheld = still
		s.mu.Unlock()
	}
}

// corruptNext makes the next n responses of typeURL invalid.
func (u *Upstream) corruptNext(typeURL string, n int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.corrupt == nil {
		u.corrupt = map[string]int{}
	}
	u.corrupt[typeURL] += n
	u.strict = true
}

func (u *Upstream) armed(typeURL string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.corrupt[typeURL] > 0
}

// takeCorrupt reports whether the response of typeURL about to go out is to
// be invalid, and counts it.
func (u *Upstream) takeCorrupt(typeURL string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.corrupt[typeURL] == 0 {
		return false
	}
	u.corrupt[typeURL]--
	return true
}

// quietAfterNACK reports whether a request is a NACK the server answers
// with silence (strict servers send again only on a change).
func (u *Upstream) quietAfterNACK(nack, changed bool) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.strict && nack && !changed
}

// invalid returns a resource of typeURL the relay must reject: bytes that
// do not decode, or another type's resource.
func (u *Upstream) invalid(typeURL string, body []byte) *anypb.Any {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.rng.IntN(2) == 0 {
		return &anypb.Any{TypeUrl: typeURL, Value: []byte{0x0a, 0x7f}} // field 1, 127 bytes that are not there
	}
	other := keying.RouteType
	if typeURL == other {
		other = keying.ListenerType
	}
	return &anypb.Any{TypeUrl: other, Value: body}
}

// corruptSotW makes resp invalid and sends it without recording it: the
// relay rejects it. The next push sends the selection again. Called with
// s.mu held.
func (s *ustream) corruptSotW(resp *discoverypb.DiscoveryResponse, st *usub) {
	resp.Resources[0] = s.u.invalid(resp.TypeUrl, resp.Resources[0].GetValue())
	st.lastSel, st.lastNonce = "", resp.Nonce
	s.outLocked(resp)
}

// corruptDelta makes resp invalid and sends it without recording it; the
// stream's record of what the relay holds is undone (restore). Called with
// s.mu held.
func (s *ustream) corruptDelta(resp *discoverypb.DeltaDiscoveryResponse, restore func()) {
	r := resp.Resources[0]
	r.Resource = s.u.invalid(resp.TypeUrl, r.GetResource().GetValue())
	restore()
	s.outLocked(resp)
}

// The fault steps of a schedule (Dims.Silence, Dims.Invalid); OpBulk
// (Dims.Large) is in names.go.
const (
	OpSilence Op = "silence" // the servers withhold their answers of Type for N ms (0: until speak)
	OpSpeak   Op = "speak"   // the servers answer Type again
	OpCorrupt Op = "corrupt" // each server's next N responses of Type are invalid
)

func (s Step) faultString() string {
	t := "every type"
	if s.Type != "" {
		t = keying.ShortType(s.Type)
	}
	switch s.Op {
	case OpSilence:
		if s.N == 0 {
			return fmt.Sprintf("silence the servers on %s until they speak", t)
		}
		return fmt.Sprintf("silence the servers on %s for %d ms", t, s.N)
	case OpSpeak:
		return fmt.Sprintf("the servers speak on %s", t)
	case OpCorrupt:
		return fmt.Sprintf("the servers send %d invalid %s responses each", s.N, t)
	case OpBulk:
		return fmt.Sprintf("publish %d clusters more", s.N)
	}
	return string(s.Op)
}

// fault executes a fault step: on every server (a fallback server serves
// only while the first is down; the fault must meet the relays).
func (r *Run) fault(st Step) {
	if st.Op == OpBulk {
		r.model.bulk(st.N)
		r.publish()
		r.trace("published %d: %d clusters more", r.world.Len()-1, st.N)
		return
	}
	for _, u := range r.ups {
		switch st.Op {
		case OpSilence:
			u.silence(st.Type, time.Duration(st.N)*time.Millisecond)
		case OpSpeak:
			u.speak(st.Type)
		case OpCorrupt:
			u.corruptNext(st.Type, st.N)
		}
	}
}

// faultSteps draws the fault steps of the dimensions d into steps, at
// random places.
func faultSteps(steps []Step, d Dims, x *rand.Rand) []Step {
	insert := func(at int, st Step) {
		steps = slices.Insert(steps, min(at, len(steps)), st)
	}
	typ := func() string {
		if x.IntN(4) == 0 {
			return "" // every type
		}
		return worldTypes[x.IntN(len(worldTypes))]
	}
	if d.Silence {
		for range 1 + x.IntN(3) {
			st := Step{Op: OpSilence, Type: typ(), N: 300 + x.IntN(1700)}
			at := firstAnswer(steps, x)
			if x.IntN(3) == 0 {
				st.N = 0 // until a later step, or the end
				insert(at+1+x.IntN(10), Step{Op: OpSpeak, Type: st.Type})
			}
			insert(at, st)
		}
	}
	if d.Large {
		insert(x.IntN(len(steps)+1), Step{Op: OpBulk, N: 10001})
	}
	if d.Invalid {
		for range 1 + x.IntN(3) {
			t := worldTypes[x.IntN(len(worldTypes))]
			insert(firstAnswer(steps, x), Step{Op: OpCorrupt, Type: t, N: 1 + x.IntN(2)})
		}
	}
	return steps
}

// firstAnswer returns where a fault goes: half the time just before a relay
// restart or an upstream server's return, so that it meets a stream's first
// answer (a NACKed first answer is no answer; clients come back holding what
// a silent upstream does not confirm), else anywhere.
func firstAnswer(steps []Step, x *rand.Rand) int {
	var at []int
	for i, st := range steps {
		if st.Op == OpRelayRestart || st.Op == OpUpstreamUp {
			at = append(at, i)
		}
	}
	if len(at) > 0 && x.IntN(2) == 0 {
		return at[x.IntN(len(at))]
	}
	return x.IntN(len(steps) + 1)
}
