package gworacle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/internal/gatewaycp"
)

// dataPlane is one gateway data plane (SotW or Delta) of a cluster. Its
// run goroutine keeps a stream open to its target relay, reconnecting (with
// what it holds) when the stream ends or it moves.
type dataPlane struct {
	// set at creation, read-only
	run     *Run
	id      string
	delta   bool
	cluster string
	done    chan struct{} // closed when the run goroutine returns

	mu     sync.Mutex
	target int
	closed bool
	cancel context.CancelFunc // of the current stream
	gen    int                // counts streams: what a stream sent carries its gen
	// SotW: the version held and the gen of the stream that sent it.
	version string
	vgen    int
	// Delta: per type, name → what is held.
	held map[string]map[string]heldRes
}

type heldRes struct {
	version string
	gen     int
}

// stream is what a check needs of the stream a response came on.
type stream struct {
	gen      int
	instance string // the relay instance it was opened to
	slot     int
	joinSeq  int // the control plane's send log length when it opened
}

// newDataPlane starts a data plane holding brought (nil: nothing), as if
// received on a stream of another relay (gen 0).
func newDataPlane(r *Run, id string, delta bool, cluster string, target int, brought *published) *dataPlane {
	d := &dataPlane{run: r, id: id, delta: delta, cluster: cluster, target: target, done: make(chan struct{}),
		held: map[string]map[string]heldRes{}}
	if brought != nil && !delta {
		d.version = brought.version
	}
	if brought != nil && delta {
		for t, byName := range brought.res {
			d.held[t] = map[string]heldRes{}
			for n, v := range byName {
				d.held[t][n] = heldRes{version: v}
			}
		}
	}
	go d.loop()
	return d
}

func (d *dataPlane) moveTo(target int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.target = target
	if d.cancel != nil {
		d.cancel()
	}
}

func (d *dataPlane) close() {
	d.mu.Lock()
	d.closed = true
	if d.cancel != nil {
		d.cancel()
	}
	d.mu.Unlock()
	<-d.done
}

// loop opens streams until the data plane is closed.
func (d *dataPlane) loop() {
	defer close(d.done)
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		d.cancel = cancel
		d.gen++
		addr, instance := d.run.slot(d.target)
		s := stream{gen: d.gen, instance: instance, slot: d.target, joinSeq: len(d.run.cp.SentLog())}
		d.mu.Unlock()
		err := d.serve(ctx, addr, s)
		cancel()
		d.run.trace("%s: stream %d to %s ended: %v", d.id, s.gen, instance, err)
		time.Sleep(30 * time.Millisecond)
	}
}

// serve runs one stream: the first request with what the data plane holds,
// then a check and an ACK of every response.
func (d *dataPlane) serve(ctx context.Context, addr string, s stream) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	if !d.delta {
		cs, err := controlv1.NewConfigurationDiscoveryServiceClient(conn).StreamConfiguration(ctx)
		if err != nil {
			return err
		}
		d.mu.Lock()
		first := &controlv1.DiscoveryRequest{NodeId: d.id, Cluster: d.cluster, Version: d.version, Subscriptions: types}
		d.mu.Unlock()
		if err := cs.Send(first); err != nil {
			return err
		}
		for {
			resp, err := cs.Recv()
			if err != nil {
				return err
			}
			d.run.trace("%s: stream %d got snapshot %s", d.id, s.gen, resp.GetVersion())
			d.onSotW(resp, s)
			if err := cs.Send(&controlv1.DiscoveryRequest{Version: resp.GetVersion(), Nonce: resp.GetNonce(), ResultStatus: gatewaycp.ACK}); err != nil {
				return err
			}
		}
	}
	cs, err := controlv1.NewDeltaDiscoveryServiceClient(conn).DeltaStreamConfiguration(ctx)
	if err != nil {
		return err
	}
	if err := cs.Send(d.deltaFirst()); err != nil {
		return err
	}
	for {
		resp, err := cs.Recv()
		if err != nil {
			return err
		}
		d.run.trace("%s: stream %d got %s: %d resources, removed %v, non_incremental=%v", d.id, s.gen, short(resp.GetTypeUrl()),
			len(resp.GetResources()), resp.GetRemovedResources(), resp.GetNonIncremental())
		d.onDelta(resp, s)
		if err := cs.Send(&controlv1.DeltaDiscoveryRequest{ResponseNonce: resp.GetNonce(), TypeUrl: resp.GetTypeUrl(), ResultStatus: gatewaycp.ACK}); err != nil {
			return err
		}
	}
}

// deltaFirst is a Delta stream's first request: every type, declaring what
// is held.
func (d *dataPlane) deltaFirst() *controlv1.DeltaDiscoveryRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	req := &controlv1.DeltaDiscoveryRequest{NodeId: d.id, Cluster: d.cluster, ResourceNamesSubscribe: types,
		InitialResourceVersions: map[string]string{}}
	for t, byName := range d.held {
		if len(byName) == 0 {
			continue
		}
		vs := map[string]string{}
		for n, h := range byName {
			vs[n] = h.version
		}
		js, _ := json.Marshal(vs)
		req.InitialResourceVersions[t] = string(js)
	}
	return req
}

func (d *dataPlane) fail(s stream, format string, args ...any) {
	d.run.fail("%s (%s, cluster %s, stream %d to %s): %s", d.id, map[bool]string{false: "sotw", true: "delta"}[d.delta],
		d.cluster, s.gen, s.instance, fmt.Sprintf(format, args...))
}

// window is the relay's window for stream s (see Run.window); ok is false
// when the relay instance may have changed since the stream opened (the
// stream's relay is unknown: nothing is checked against it).
func (d *dataPlane) window(s stream) (lo, hi int, known, ok bool) {
	if _, now := d.run.slot(s.slot); now != s.instance {
		return 0, 0, false, false
	}
	lo, hi, known = d.run.window(s.instance, d.cluster, d.delta, s.joinSeq)
	return lo, hi, known, true
}

// onSotW checks a snapshot and takes it.
func (d *dataPlane) onSotW(resp *controlv1.DiscoveryResponse, s stream) {
	h := d.run.hist
	i := h.indexOf(d.cluster, resp.GetVersion())
	if i < 0 {
		d.fail(s, "sent snapshot version %q, which the control plane never published for the cluster", resp.GetVersion())
		return
	}
	if !proto.Equal(resp.GetSnapshot(), h.at(d.cluster, i).snap) {
		d.fail(s, "sent snapshot %s with content the control plane did not publish at that version", resp.GetVersion())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.version != "" {
		if cur := h.indexOf(d.cluster, d.version); i < cur {
			d.checkBrought(s, d.vgen, fmt.Sprintf("rolled back: sent snapshot %s, older than the %s it holds", resp.GetVersion(), d.version),
				func(lo, hi int) bool { return lo <= i && i <= hi })
		}
	}
	d.version, d.vgen = resp.GetVersion(), s.gen
}

// checkBrought fails the run for what the stream did to content held since
// stream gen got: always if this stream sent it; for content brought, unless
// allowed by the relay's window. Called with mu held.
func (d *dataPlane) checkBrought(s stream, got int, what string, allowed func(lo, hi int) bool) {
	if got == s.gen {
		d.fail(s, "%s (this stream sent it)", what)
		return
	}
	lo, hi, known, ok := d.window(s)
	if !ok || (known && allowed(lo, hi)) {
		return
	}
	d.fail(s, "%s (brought from elsewhere; the relay's window is [%d, %d], known=%v)", what, lo, hi, known)
}

// onDelta checks a Delta response and applies it.
func (d *dataPlane) onDelta(resp *controlv1.DeltaDiscoveryResponse, s stream) {
	t := resp.GetTypeUrl()
	if !slices.Contains(types, t) {
		d.fail(s, "sent type %q, not subscribed", t)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	held := d.held[t]
	if held == nil {
		held = map[string]heldRes{}
		d.held[t] = held
	}
	sent := map[string]bool{}
	for _, r := range resp.GetResources() {
		sent[r.GetName()] = true
		d.checkResource(s, t, r, held[r.GetName()])
		held[r.GetName()] = heldRes{version: r.GetVersion(), gen: s.gen}
	}
	removed := slices.Clone(resp.GetRemovedResources())
	if resp.GetNonIncremental() {
		for n := range held {
			if !sent[n] {
				removed = append(removed, n)
			}
		}
	}
	for _, n := range removed {
		if cur, ok := held[n]; ok {
			d.checkRemoval(s, t, n, cur)
			delete(held, n)
		}
	}
}

// checkResource checks one resource sent over cur (version "": none held).
// Called with mu held.
func (d *dataPlane) checkResource(s stream, t string, r *controlv1.Resource, cur heldRes) {
	h, name, v := d.run.hist, r.GetName(), r.GetVersion()
	sum := sha256.Sum256(r.GetResource().GetValue())
	if hex.EncodeToString(sum[:8]) != v {
		d.fail(s, "sent %s %s at version %s with content of another version", short(t), name, v)
	}
	_, last, ok := h.span(d.cluster, t, name, v)
	if !ok {
		d.fail(s, "sent %s %s at version %s, which the control plane never published", short(t), name, v)
		return
	}
	if cur.version == "" || cur.version == v {
		return
	}
	first, _, _ := h.span(d.cluster, t, name, cur.version)
	if last < first {
		d.checkBrought(s, cur.gen, fmt.Sprintf("rolled back: sent %s %s at %s, older than the %s it holds", short(t), name, v, cur.version),
			func(lo, hi int) bool { return h.currentIn(d.cluster, t, name, v, lo, hi) })
	}
}

// checkRemoval checks that a removal of what the data plane holds is the
// control plane's word. Called with mu held.
func (d *dataPlane) checkRemoval(s stream, t, name string, cur heldRes) {
	h := d.run.hist
	first, _, _ := h.span(d.cluster, t, name, cur.version)
	if h.currentIn(d.cluster, t, name, "", first, 1<<30) {
		return
	}
	d.checkBrought(s, cur.gen, fmt.Sprintf("phantom removal: told %s %s (held at %s) is gone; the control plane still has it", short(t), name, cur.version),
		func(lo, hi int) bool { return h.currentIn(d.cluster, t, name, "", lo, hi) })
}

// converged returns "" when the data plane holds exactly the control
// plane's latest state of its cluster, else what differs.
func (d *dataPlane) converged() string {
	want := d.run.hist.latest(d.cluster)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.delta {
		if d.version != want.version {
			return fmt.Sprintf("%s (sotw, %s): holds %q, want %q", d.id, d.cluster, d.version, want.version)
		}
		return ""
	}
	for _, t := range types {
		got := map[string]string{}
		for n, h := range d.held[t] {
			got[n] = h.version
		}
		if !maps.Equal(got, want.res[t]) {
			return fmt.Sprintf("%s (delta, %s): %s holds %v, want %v (%s)", d.id, d.cluster, short(t), got, want.res[t], want.version)
		}
	}
	return ""
}

func short(t string) string { return t[len("type.googleapis.com/gateway.control.v1."):] }
