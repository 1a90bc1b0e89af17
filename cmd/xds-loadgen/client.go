package main

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"time"
	"unique"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

const resourceWrapperURL = "type.googleapis.com/envoy.service.discovery.v3.Resource"

// client is one simulated xDS client: a single goroutine that owns its stream
// and its state.
type client struct {
	// Set at creation, read-only.
	e          *Engine
	id         int
	conn       *grpc.ClientConn
	node       *corev3.Node
	nack, slow bool
	stuck      bool              // stops reading once synced (see Config.StuckRatio)
	params     map[string]string // TP2 dynamic parameters: names go out as locators
	held       heldClusters      // written by the client goroutine, read by its LRS goroutine

	// Owned by the client goroutine (read by Engine.Run after it returns).
	st            *clientState
	gw            *gatewayState // the gateway dialect's state
	startedAt     time.Time
	syncedAt      time.Time
	updates       int64
	reachedTarget bool
}

// run keeps a stream open until ctx is done, reconnecting with jittered
// exponential backoff.
func (c *client) run(ctx context.Context) {
	const minBackoff, maxBackoff = 100 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for {
		gotResponse, err := c.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if gotResponse {
			c.e.ctr.streamErrors.Add(1)
			backoff = minBackoff
		} else {
			c.e.ctr.connectErrors.Add(1)
		}
		c.e.log.Debug("stream ended", zap.Int("client", c.id), zap.Error(err))
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, maxBackoff)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// stream runs one ADS stream; it reports whether any response arrived.
func (c *client) stream(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.e.cfg.Dialect == DialectGateway {
		return c.runGateway(ctx)
	}
	c.st.streamReset()
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn)
	if c.e.cfg.Protocol == ProtocolDelta {
		return c.runDelta(ctx, ads)
	}
	return c.runSotw(ctx, ads)
}

// hangs reports whether the client stops reading now: a stuck client that
// has synced.
func (c *client) hangs() bool { return c.stuck && !c.syncedAt.IsZero() }

// pause makes a slow client wait before its next read.
func (c *client) pause(ctx context.Context) {
	if !c.slow || c.e.cfg.SlowDelay <= 0 {
		return
	}
	t := time.NewTimer(c.e.cfg.SlowDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (c *client) runSotw(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient) (bool, error) {
	st, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("loadgen: open stream: %w", err)
	}
	c.e.ctr.connected.Add(1)
	defer c.e.ctr.connected.Add(-1)
	first := true
	send := func(reqs []*discoveryv3.DiscoveryRequest) error {
		for _, r := range reqs {
			if first {
				// Only the first request of a stream carries the node.
				r.Node, first = c.node, false
			}
			if err := st.Send(r); err != nil {
				return fmt.Errorf("loadgen: send: %w", err)
			}
		}
		return nil
	}
	var reqs []*discoveryv3.DiscoveryRequest
	for _, k := range c.st.initialKinds() {
		if r := c.sotwRequest(k); r != nil {
			reqs = append(reqs, r)
		}
	}
	if err := send(reqs); err != nil {
		return false, err
	}
	got := false
	for {
		if got {
			c.pause(ctx)
		}
		if c.hangs() {
			// Never read again: the stream stays open, its window fills.
			<-ctx.Done()
			return got, ctx.Err()
		}
		resp, err := st.Recv()
		if err != nil {
			return got, fmt.Errorf("loadgen: receive: %w", err)
		}
		got = true
		c.e.ctr.responses.Add(1)
		if ce := c.e.log.Check(zap.DebugLevel, "response"); ce != nil {
			ce.Write(zap.Int("client", c.id), zap.String("type", resp.GetTypeUrl()), zap.String("version", resp.GetVersionInfo()),
				zap.Int("resources", len(resp.GetResources())))
		}
		if err := send(c.handleSotw(resp, time.Now())); err != nil {
			return got, err
		}
	}
}

// sotwRequest builds the current SotW request of kind k (subscription, last
// accepted version, last nonce), or nil when there is nothing to ask for.
func (c *client) sotwRequest(k fleet.Kind) *discoveryv3.DiscoveryRequest {
	t := &c.st.types[k]
	if !t.wildcard && len(t.names) == 0 && !t.requested {
		return nil
	}
	t.requested = true
	r := &discoveryv3.DiscoveryRequest{TypeUrl: k.TypeURL(), VersionInfo: t.version, ResponseNonce: t.nonce}
	if !t.wildcard {
		// Envoy-style legacy wildcard: no names. Named subscriptions list every name.
		r.ResourceNames, r.ResourceLocators = c.subscription(c.st.names(k))
	}
	return r
}

// subscription returns names as the client subscribes to them: plain names,
// or TP2 resource locators with its parameters.
func (c *client) subscription(names []string) ([]string, []*discoveryv3.ResourceLocator) {
	if c.params == nil {
		return names, nil
	}
	locs := make([]*discoveryv3.ResourceLocator, len(names))
	for i, n := range names {
		locs[i] = &discoveryv3.ResourceLocator{Name: n, DynamicParameters: c.params}
	}
	return nil, locs
}

func nackStatus() *statuspb.Status {
	return &statuspb.Status{Code: int32(codes.InvalidArgument), Message: "xds-loadgen: simulated NACK"}
}

// handleSotw applies a SotW response and returns the requests to send: the ACK
// (or NACK) and any subscription changes it causes.
func (c *client) handleSotw(resp *discoveryv3.DiscoveryResponse, now time.Time) []*discoveryv3.DiscoveryRequest {
	k, ok := fleet.KindOf(resp.GetTypeUrl())
	if !ok {
		return nil // never subscribed; ignore
	}
	t := &c.st.types[k]
	t.nonce = resp.GetNonce()
	wasSynced := !c.syncedAt.IsZero()
	present := map[string]bool{}
	bad := false
	for _, a := range resp.GetResources() {
		b, name := a.GetValue(), ""
		if a.GetTypeUrl() == resourceWrapperURL {
			w := &discoveryv3.Resource{}
			if err := a.UnmarshalTo(w); err != nil {
				bad = true
				continue
			}
			if w.GetResource() == nil {
				continue // TTL heartbeat
			}
			b, name = w.GetResource().GetValue(), w.GetName()
		} else if a.GetTypeUrl() != resp.GetTypeUrl() {
			bad = true
			continue
		}
		name, err := c.absorb(k, name, b, "", now, wasSynced)
		if err != nil {
			bad = true
			continue
		}
		present[name] = true
	}
	if k == fleet.Listeners || k == fleet.Clusters {
		// xDS: SotW LDS/CDS responses carry the full state; what is missing was deleted.
		for _, name := range c.st.retainOnly(k, present) {
			c.lost(k, name, "omitted from a SotW response")
		}
	}
	c.notFound(k, resp.GetResourceErrors())
	if k == fleet.Clusters {
		c.publishClusters()
	}
	if len(present) > 0 {
		t.received = true
	}
	nack := c.nack || bad
	if !nack {
		t.version = resp.GetVersionInfo()
	}
	reqs := []*discoveryv3.DiscoveryRequest{c.sotwRequest(k)}
	if nack {
		reqs[0].ErrorDetail = nackStatus()
		c.e.ctr.nacks.Add(1)
	}
	for _, ch := range c.st.resubscribe() {
		if r := c.sotwRequest(ch.kind); r != nil {
			reqs = append(reqs, r)
		}
	}
	c.checkSynced(now)
	return reqs
}

// absorb records one received resource and counts updates and propagation. A
// named kind ignores resources it did not subscribe to. name may be empty when
// only the serialized resource carries it. It returns the name.
func (c *client) absorb(k fleet.Kind, name string, b []byte, version string, now time.Time, wasSynced bool) (string, error) {
	t := &c.st.types[k]
	h := maphash.Bytes(c.e.seed, b)
	// Fast path, no allocation and no shared lock: the same bytes as before.
	var prev resourceState
	var known bool
	if name != "" {
		prev, known = t.known[name]
	} else if nb, ok := peekName(b); ok {
		prev, known = t.known[string(nb)]
	}
	if known && prev.hash == h {
		if name == "" {
			name = prev.d.name // the key it was stored under
		}
		if version != prev.version {
			prev.version = unique.Make(version).Value()
			t.known[name] = prev
		}
		return name, nil
	}
	d, err := c.e.decoded.get(k, h, b)
	if err != nil {
		return name, err
	}
	if name == "" || name == d.name {
		name = d.name // one copy of the string for all clients
	}
	if !t.wildcard && !t.names[name] {
		return name, nil
	}
	if version != "" {
		version = unique.Make(version).Value()
	}
	t.known[name] = resourceState{hash: h, version: version, d: d}
	if !known || !slices.Equal(prev.d.refs, d.refs) {
		t.refsChanged = true
	}
	if !wasSynced {
		return name, nil
	}
	if known && d.stamp != 0 && prev.d.stamp == d.stamp {
		return name, nil // same resource, encoded differently
	}
	stamp := d.stamp
	if !known {
		stamp = 0 // a new resource: no propagation sample
	}
	c.counted(now, stamp)
	return name, nil
}

// counted counts one update received after the client synced, with its
// propagation from the creation stamp (Unix nanoseconds; 0 for none).
func (c *client) counted(now time.Time, stamp int64) {
	c.updates++
	c.e.ctr.updates.Add(1)
	if stamp != 0 {
		d := now.Sub(time.Unix(0, stamp))
		c.e.prop.Record(d)
		c.e.changes.Record(stamp, d)
	}
	if cfg := c.e.cfg; cfg.Updates > 0 && !c.reachedTarget && c.updates >= cfg.Updates {
		c.reachedTarget = true
		c.e.clientsDone.Add(1)
		wake(c.e.doneCh)
	}
}

// lost records that the server told the client that a resource it held no
// longer exists (see Loss).
func (c *client) lost(k fleet.Kind, name, how string) {
	c.e.recordLoss(Loss{Client: c.node.GetId(), Type: k.TypeURL(), Name: name, How: how})
}

// notFound records the TP3 NOT_FOUND errors of a response about resources
// the client holds as losses, and forgets those resources.
func (c *client) notFound(k fleet.Kind, errs []*discoveryv3.ResourceError) {
	for _, e := range errs {
		if codes.Code(e.GetErrorDetail().GetCode()) != codes.NotFound {
			continue
		}
		if name := e.GetResourceName().GetName(); c.st.remove(k, name) {
			c.lost(k, name, "TP3 NOT_FOUND")
		}
	}
}

// checkSynced records the moment the client first has its whole configuration.
func (c *client) checkSynced(now time.Time) {
	if c.syncedAt.IsZero() && c.st.synced() {
		c.markSynced(now)
	}
}

// markSynced records that the client synced at now.
func (c *client) markSynced(now time.Time) {
	c.syncedAt = now
	c.e.ctr.synced.Add(1)
	wake(c.e.syncCh)
	if c.e.cfg.Updates > 0 {
		wake(c.e.doneCh) // the number of synced clients changed
	}
}

func (c *client) runDelta(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient) (bool, error) {
	st, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("loadgen: open delta stream: %w", err)
	}
	c.e.ctr.connected.Add(1)
	defer c.e.ctr.connected.Add(-1)
	first := true
	send := func(reqs []*discoveryv3.DeltaDiscoveryRequest) error {
		for _, r := range reqs {
			if first {
				r.Node, first = c.node, false
			}
			if err := st.Send(r); err != nil {
				return fmt.Errorf("loadgen: send: %w", err)
			}
		}
		return nil
	}
	var reqs []*discoveryv3.DeltaDiscoveryRequest
	for _, k := range c.st.initialKinds() {
		t := &c.st.types[k]
		t.requested = true
		r := &discoveryv3.DeltaDiscoveryRequest{
			TypeUrl: k.TypeURL(),
			// xDS: do not resend what the client already has after a reconnect.
			InitialResourceVersions: c.st.initialVersions(k),
		}
		if !t.wildcard {
			r.ResourceNamesSubscribe, r.ResourceLocatorsSubscribe = c.subscription(c.st.names(k))
		}
		reqs = append(reqs, r)
	}
	if err := send(reqs); err != nil {
		return false, err
	}
	got := false
	for {
		if got {
			c.pause(ctx)
		}
		if c.hangs() {
			// Never read again: the stream stays open, its window fills.
			<-ctx.Done()
			return got, ctx.Err()
		}
		resp, err := st.Recv()
		if err != nil {
			return got, fmt.Errorf("loadgen: receive: %w", err)
		}
		got = true
		c.e.ctr.responses.Add(1)
		if ce := c.e.log.Check(zap.DebugLevel, "delta response"); ce != nil {
			ce.Write(zap.Int("client", c.id), zap.String("type", resp.GetTypeUrl()),
				zap.Int("resources", len(resp.GetResources())), zap.Int("removed", len(resp.GetRemovedResources())))
		}
		if err := send(c.handleDelta(resp, time.Now())); err != nil {
			return got, err
		}
	}
}

// handleDelta applies a Delta response and returns the requests to send: the
// ACK (or NACK) and any subscription changes it causes.
func (c *client) handleDelta(resp *discoveryv3.DeltaDiscoveryResponse, now time.Time) []*discoveryv3.DeltaDiscoveryRequest {
	k, ok := fleet.KindOf(resp.GetTypeUrl())
	if !ok {
		return nil
	}
	t := &c.st.types[k]
	t.nonce = resp.GetNonce()
	wasSynced := !c.syncedAt.IsZero()
	bad := false
	for _, r := range resp.GetResources() {
		if r.GetResource() == nil {
			continue // TTL heartbeat
		}
		if _, err := c.absorb(k, r.GetName(), r.GetResource().GetValue(), r.GetVersion(), now, wasSynced); err != nil {
			bad = true
			continue
		}
		t.received = true
	}
	for _, n := range resp.GetRemovedResources() {
		if c.st.remove(k, n) {
			c.lost(k, n, "removed_resources")
		}
	}
	for _, rn := range resp.GetRemovedResourceNames() {
		if c.st.remove(k, rn.GetName()) {
			c.lost(k, rn.GetName(), "removed_resource_names")
		}
	}
	c.notFound(k, resp.GetResourceErrors())
	if k == fleet.Clusters {
		c.publishClusters()
	}
	ack := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
	if c.nack || bad {
		ack.ErrorDetail = nackStatus()
		c.e.ctr.nacks.Add(1)
	}
	reqs := []*discoveryv3.DeltaDiscoveryRequest{ack}
	for _, ch := range c.st.resubscribe() {
		ct := &c.st.types[ch.kind]
		if !ct.requested && len(ch.subscribe) == 0 {
			continue
		}
		ct.requested = true
		r := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: ch.kind.TypeURL()}
		r.ResourceNamesSubscribe, r.ResourceLocatorsSubscribe = c.subscription(ch.subscribe)
		r.ResourceNamesUnsubscribe, r.ResourceLocatorsUnsubscribe = c.subscription(ch.unsubscribe)
		reqs = append(reqs, r)
	}
	c.checkSynced(now)
	return reqs
}
