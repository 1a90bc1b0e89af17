package gworacle

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/config"
	"github.com/xds-relay/xds-relay/internal/gatewaycp"
	"github.com/xds-relay/xds-relay/relay"
)

// Run is one execution of a schedule. Its checks run in the data planes'
// goroutines at every response; the first failures are kept.
type Run struct {
	sched *Schedule
	hist  *history
	model *model
	rng   *rand.Rand
	cp    *gatewaycp.Server
	down  bool // the control plane is stopped (owned by the step goroutine)
	// stops are the lengths of the control plane's send log at each of its
	// outages: every upstream stream ended there.
	stopsMu sync.Mutex
	stops   []int
	relays  []*relaySlot
	dir     string
	log     *zap.Logger

	mu       sync.Mutex
	dps      map[string]*dataPlane
	failures []string
}

// relaySlot is one relay replica: its address stays across restarts.
type relaySlot struct {
	index int

	mu    sync.Mutex
	addr  string
	gen   int
	id    string // the instance's node id ("relay-A2")
	relay *relay.Relay
	done  chan error
}

// stepGap is the time between two steps: enough for a stream to open or a
// push to go out, so that steps interleave with what they set off.
const stepGap = 25 * time.Millisecond

// Execute runs sched and returns what failed: a check at some response, or
// convergence once the schedule is over. dir holds warm-restart files.
func Execute(sched *Schedule, dir string, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	r := &Run{sched: sched, hist: newHistory(), rng: rand.New(rand.NewPCG(sched.Seed, 2)), dir: dir, log: log,
		dps: map[string]*dataPlane{}}
	defer r.shutdown()
	r.model = newModel(sched.Opts.Clusters, r.rng)
	// A loopback address of the run's own: a restarted relay or control
	// plane takes its port again, and no other run can have taken it.
	host := fmt.Sprintf("127.%d.%d.%d:0", 1+rand.IntN(254), rand.IntN(256), 1+rand.IntN(254))
	cp, err := gatewaycp.Start(host)
	if err != nil {
		return err
	}
	r.cp = cp
	for c := range sched.Opts.Clusters {
		r.hist.publish(cp, clusterName(c), r.model.snapshot(c))
	}
	for i := range sched.Opts.Replicas {
		slot := &relaySlot{index: i, addr: cp.Addr()[:strings.LastIndexByte(cp.Addr(), ':')] + ":0"}
		r.relays = append(r.relays, slot)
		if err := r.startRelay(slot); err != nil {
			return err
		}
	}
	for _, st := range sched.Steps {
		r.trace("step: %s", st)
		if err := r.step(st); err != nil {
			return err
		}
		if err := r.failed(); err != nil {
			return err
		}
		time.Sleep(stepGap)
	}
	return r.quiesce()
}

// step executes one step.
func (r *Run) step(st Step) error {
	r.mu.Lock()
	d := r.dps[st.DP]
	r.mu.Unlock()
	switch st.Op {
	case OpPublish:
		for range st.N {
			r.model.mutate(st.Cluster, r.rng)
		}
		r.hist.publish(r.cp, clusterName(st.Cluster), r.model.snapshot(st.Cluster))
	case OpJoin:
		var brought *published
		if st.Brought >= 0 {
			brought = r.hist.back(clusterName(st.Cluster), st.Brought)
		}
		d := newDataPlane(r, st.DP, st.Delta, clusterName(st.Cluster), st.Relay, brought)
		r.mu.Lock()
		r.dps[st.DP] = d
		r.mu.Unlock()
	case OpLeave:
		if d != nil {
			r.mu.Lock()
			delete(r.dps, st.DP)
			r.mu.Unlock()
			d.close()
		}
	case OpMove:
		if d != nil {
			d.moveTo(st.Relay)
		}
	case OpPause:
		time.Sleep(time.Duration(st.N) * time.Millisecond) // the schedule's own time passing
	case OpUpstreamDown:
		r.cp.Stop()
		r.down = true
		r.stopsMu.Lock()
		r.stops = append(r.stops, len(r.cp.SentLog()))
		r.stopsMu.Unlock()
	case OpUpstreamUp:
		return r.upstreamUp()
	case OpRelayRestart:
		slot := r.relays[st.Relay]
		r.stopRelay(slot)
		return r.startRelay(slot)
	}
	return nil
}

func (r *Run) upstreamUp() error {
	if !r.down {
		return nil
	}
	r.down = false
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.cp.Restart(ctx)
}

// quiesce ends the schedule: the control plane up, a last change of every
// cluster if the world says so, and then every data plane must hold exactly
// the control plane's latest state of its cluster.
func (r *Run) quiesce() error {
	if err := r.upstreamUp(); err != nil {
		return err
	}
	if r.sched.Opts.FinalPublish {
		for c := range r.sched.Opts.Clusters {
			r.model.touchAll(c)
			r.hist.publish(r.cp, clusterName(c), r.model.snapshot(c))
		}
	}
	// Twenty seconds without progress fail the run (a relay's upstream
	// backoff after an outage is at most 10 s).
	deadline, last := time.Now().Add(20*time.Second), ""
	for {
		if err := r.failed(); err != nil {
			return err
		}
		var diffs []string
		for _, d := range r.dpList() {
			if diff := d.converged(); diff != "" {
				diffs = append(diffs, diff)
			}
		}
		if len(diffs) == 0 {
			return nil
		}
		slices.Sort(diffs)
		if now := strings.Join(diffs, "\n  "); now != last {
			last, deadline = now, time.Now().Add(20*time.Second)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no convergence 20 s after the schedule ended (or the data planes' last progress):\n  %s\n%s", last, r.dump())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *Run) dpList() []*dataPlane {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*dataPlane, 0, len(r.dps))
	for _, d := range r.dps {
		out = append(out, d)
	}
	return out
}

// dump describes the relays' gateway groups, for a failure message.
func (r *Run) dump() string {
	var b strings.Builder
	for _, s := range r.relays {
		s.mu.Lock()
		rl, id := s.relay, s.id
		s.mu.Unlock()
		if rl != nil {
			fmt.Fprintf(&b, "relay %s: %+v\n", id, rl.DebugGateway(""))
		}
	}
	return b.String()
}

// shutdown stops every data plane, relay and the control plane.
func (r *Run) shutdown() {
	for _, d := range r.dpList() {
		d.close()
	}
	for _, s := range r.relays {
		r.stopRelay(s)
	}
	if r.cp != nil {
		r.cp.Stop()
	}
}

func (r *Run) trace(format string, args ...any) {
	if ce := r.log.Check(zap.DebugLevel, "gworacle"); ce != nil {
		ce.Write(zap.String("event", fmt.Sprintf(format, args...)))
	}
}

// fail records a failed check.
func (r *Run) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.failures) < 5 {
		r.failures = append(r.failures, fmt.Sprintf(format, args...))
	}
}

func (r *Run) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.failures) == 0 {
		return nil
	}
	return errors.New(strings.Join(r.failures, "\n"))
}

// slot returns relay slot i's address and current instance id.
func (r *Run) slot(i int) (addr, instance string) {
	s := r.relays[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr, s.id
}

// startRelay starts the next instance of slot on its address, with the
// control plane as its upstream and a warm-restart file.
func (r *Run) startRelay(s *relaySlot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.id = fmt.Sprintf("relay-%c%d", 'A'+s.index, s.gen)
	cfg := config.Default()
	cfg.Admin = ""
	cfg.Node = config.Node{ID: s.id, Cluster: "relay"}
	cfg.Upstream.XDSServers = []config.Server{{ServerURI: r.cp.Addr(), Protocol: "sotw"}}
	cfg.Upstream.Linger = 30 * time.Millisecond
	cfg.Cache.PersistPath = filepath.Join(r.dir, fmt.Sprintf("relay-%d.cache", s.index))
	var lis net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lis, err = net.Listen("tcp", s.addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("gworacle: relay listen: %w", err)
	}
	s.addr = lis.Addr().String()
	cfg.Listen = s.addr
	rl, err := relay.New(cfg, r.log.Named(s.id))
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("gworacle: relay: %w", err)
	}
	s.relay, s.done = rl, make(chan error, 1)
	go func() { s.done <- rl.Serve(lis) }()
	return nil
}

// stopRelay closes slot's relay (its warm-restart file is written).
func (r *Run) stopRelay(s *relaySlot) {
	s.mu.Lock()
	rl, done := s.relay, s.done
	s.relay = nil
	s.mu.Unlock()
	if rl != nil {
		rl.Close()
		<-done
	}
}

// window is the range of a cluster's snapshot indexes relay instance's
// group (SotW or Delta) may hold as the upstream's word, for a data plane
// whose stream opened when the control plane's send log had joinSeq
// entries: from the last one sent before (unless an outage ended that
// stream before the data plane came; else from the first one sent after) to
// the latest. ok is false when there is no such range.
func (r *Run) window(instance, cluster string, delta bool, joinSeq int) (lo, hi int, ok bool) {
	lo, hi = -1, -1
	lastBefore := -1
	for seq, s := range r.cp.SentLog() {
		if !strings.HasPrefix(s.NodeID, instance+"/") || s.Cluster != cluster || (s.TypeURL != "") != delta {
			continue
		}
		i := r.hist.indexOf(cluster, s.Version)
		if i < 0 {
			continue
		}
		switch {
		case seq < joinSeq:
			lo, lastBefore = i, seq
		case lo < 0:
			lo = i
		}
		hi = max(hi, i)
	}
	if lastBefore >= 0 && r.stoppedBetween(lastBefore, joinSeq) {
		return r.windowAfter(instance, cluster, delta, joinSeq)
	}
	return lo, hi, hi >= 0
}

// windowAfter is window from what the control plane sent after joinSeq only.
func (r *Run) windowAfter(instance, cluster string, delta bool, joinSeq int) (lo, hi int, ok bool) {
	lo, hi = -1, -1
	for seq, s := range r.cp.SentLog() {
		if seq < joinSeq || !strings.HasPrefix(s.NodeID, instance+"/") || s.Cluster != cluster || (s.TypeURL != "") != delta {
			continue
		}
		if i := r.hist.indexOf(cluster, s.Version); i >= 0 {
			if lo < 0 {
				lo = i
			}
			hi = max(hi, i)
		}
	}
	return lo, hi, hi >= 0
}

// stoppedBetween reports whether the control plane stopped after send seq
// a and no later than b.
func (r *Run) stoppedBetween(a, b int) bool {
	r.stopsMu.Lock()
	defer r.stopsMu.Unlock()
	for _, s := range r.stops {
		if a < s && s <= b {
			return true
		}
	}
	return false
}
