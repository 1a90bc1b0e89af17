package upstream

import (
	"testing"

	"github.com/xds-relay/xds-relay/keying"
)

// SotW: a new stream's first request names r6 and r8, the next, with the
// same (empty) nonce, r12 too. The server answers the first and ignores the
// second (xDS: its nonce is no longer the latest), so its answer says
// nothing of r12: only the answer to the ACK, which asks for r12 under the
// new nonce, does (soak seed 501161, where the relay took its copy of r12
// for deleted in between).
func TestSotWAnswerToAnEarlierRequestSaysNothingOfALaterName(t *testing.T) {
	c := bareSotW(&hookHandler{})
	c.Subscribe(keying.RouteType, "r6", "r8")
	c.takeSotW()
	c.Subscribe(keying.RouteType, "r12")
	c.takeSotW()
	acceptRoutes(t, c, "i4", "4", "r6", "r8")
	if c.AnsweredSince(keying.RouteType, "r12") {
		t.Fatal("r12 answered by the answer to a request that did not name it")
	}
	if !c.AnsweredSince(keying.RouteType, "r6") {
		t.Fatal("r6 not answered by the answer to the request that named it")
	}
	c.takeSotW() // the ACK of "4"
	acceptRoutes(t, c, "i4", "5", "r6", "r8")
	if !c.AnsweredSince(keying.RouteType, "r12") {
		t.Fatal("r12 not answered by the answer to the ACK that asked for it")
	}
}

// A request that asks for nothing new (an ACK of what the server sent)
// gets no answer unless the server's state changes, so the next request
// with the same nonce is the one a response answers.
func TestSotWAnswerAfterAPlainACK(t *testing.T) {
	c := bareSotW(&hookHandler{})
	c.Subscribe(keying.RouteType, "r6")
	c.takeSotW()
	acceptRoutes(t, c, "i4", "1", "r6")
	c.takeSotW() // the ACK: nothing new
	c.Subscribe(keying.RouteType, "r12")
	c.takeSotW()
	acceptRoutes(t, c, "i4", "2", "r6")
	if !c.AnsweredSince(keying.RouteType, "r12") {
		t.Fatal("r12 not answered by the answer to the request that asked for it after a plain ACK")
	}
}
