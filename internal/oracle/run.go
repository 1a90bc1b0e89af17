package oracle

import (
	"errors"
	"fmt"
	"hash/fnv"
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
	"github.com/xds-relay/xds-relay/keying"
	"github.com/xds-relay/xds-relay/relay"
)

// Options is one world: how the relays, the upstream and the fleet are set
// up. A Schedule is run against it.
type Options struct {
	// Protocol is what the relays speak upstream: "sotw" or "delta".
	Protocol string
	// Ordered: the upstream pushes a snapshot's types in xDS order (CDS,
	// EDS, LDS, RDS); else in a random order (it may break first).
	Ordered bool
	// Replicas is the number of relays (1 or 2); clients move between them.
	Replicas int
	// Fallback gives the relays a second upstream server (same history).
	Fallback bool
	// Persist gives each relay a warm-restart file.
	Persist bool
	// GroupBy puts the clients in a node group (keying.group_by: cluster).
	GroupBy bool
	// MaxUnreferenced is cache.max_unreferenced (LRU pressure when small).
	MaxUnreferenced int
	// Rollout turns guarded rollouts on; picky clients NACK bad versions.
	Rollout bool
	// Forgetful: the Delta upstream forgets what it sent a stream under the
	// wildcard, once the wildcard is dropped, as soon as it answers the names
	// still subscribed (go-control-plane); else it remembers it until told
	// otherwise. (Drawn apart from the schedule: seeds keep their schedules.)
	Forgetful bool
	// World shapes the resources.
	World WorldOptions
	// Dims are the widened generator's dimensions (see Dims).
	Dims Dims
}

func (o Options) String() string {
	return fmt.Sprintf("protocol=%s ordered=%v replicas=%d fallback=%v persist=%v group_by=%v max_unreferenced=%d rollout=%v tp2=%v do_not_cache=%v bad=%v forgetful=%v",
		o.Protocol, o.Ordered, o.Replicas, o.Fallback, o.Persist, o.GroupBy, o.MaxUnreferenced, o.Rollout,
		o.World.TP2, o.World.DoNotCache, o.World.Bad, o.Forgetful) + o.dimsString()
}

func (o Options) dimsString() string {
	if !o.Dims.any() {
		return ""
	}
	return " dims=" + o.Dims.String()
}

// Op is what a step does.
type Op string

// The steps of a schedule.
const (
	OpPublish      Op = "publish"       // N changes to the upstream's state, one snapshot
	OpJoin         Op = "join"          // a client connects to relay Relay
	OpLeave        Op = "leave"         // a client goes away
	OpMove         Op = "move"          // a client reconnects, to relay Relay, with what it holds
	OpSlow         Op = "slow"          // a client reads slowly (N ms before each read)
	OpFast         Op = "fast"          // a client reads at once again
	OpPause        Op = "pause"         // nothing happens for N ms
	OpUpstreamDown Op = "upstream-down" // upstream server Server stops
	OpUpstreamUp   Op = "upstream-up"   // upstream server Server serves again
	OpRelayRestart Op = "relay-restart" // relay Relay restarts (its clients reconnect)
)

// Step is one event of a schedule.
type Step struct {
	Op     Op
	Client ClientSpec // join; the client's id for the others
	Relay  int
	Server int
	N      int
	Type   string // the type a fault step is about ("" for every type)
	At     int    // the step's index in the generated schedule (Keep)
}

func (s Step) String() string {
	switch s.Op {
	case OpPublish:
		return fmt.Sprintf("publish %d changes", s.N)
	case OpJoin:
		return fmt.Sprintf("join %s to relay %d", s.Client, s.Relay)
	case OpLeave, OpFast:
		return fmt.Sprintf("%s %s", s.Op, s.Client.ID)
	case OpMove:
		return fmt.Sprintf("move %s to relay %d", s.Client.ID, s.Relay)
	case OpSlow:
		return fmt.Sprintf("slow %s (%d ms a read)", s.Client.ID, s.N)
	case OpPause:
		return fmt.Sprintf("pause %d ms", s.N)
	case OpUpstreamDown, OpUpstreamUp:
		return fmt.Sprintf("%s %d", s.Op, s.Server)
	case OpRelayRestart:
		return fmt.Sprintf("restart relay %d", s.Relay)
	}
	return s.faultString()
}

// Schedule is a world and the steps run against it; Seed made them.
type Schedule struct {
	Seed  uint64
	Opts  Options
	Steps []Step
}

func (s *Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s\n", s.Seed, s.Opts)
	for _, st := range s.Steps {
		fmt.Fprintf(&b, "  %3d  %s\n", st.At, st)
	}
	return b.String()
}

// Keep returns the schedule with only the steps generated at the given
// indices (the numbers a schedule prints): a shrunk schedule replayed.
func (s *Schedule) Keep(at []int) *Schedule {
	c := &Schedule{Seed: s.Seed, Opts: s.Opts}
	for _, st := range s.Steps {
		if slices.Contains(at, st.At) {
			c.Steps = append(c.Steps, st)
		}
	}
	return c
}

// Run is one execution of a schedule. Its checks run in the clients'
// goroutines at every response; the first failures are kept.
type Run struct {
	sched  *Schedule
	world  *World
	model  *model
	rng    *rand.Rand
	xrng   *rand.Rand // the widened dimensions' changes (Dims)
	ups    []*Upstream
	relays []*relaySlot
	dir    string
	log    *zap.Logger

	watches watchBook // what the clients watch, per relay instance

	mu       sync.Mutex
	clients  map[string]*Client
	failures []string
}

// relaySlot is one relay replica: its address stays across restarts.
type relaySlot struct {
	index int

	mu    sync.Mutex
	addr  string // guarded by mu: set by the first start
	gen   int
	id    string
	relay *relay.Relay
	done  chan error
	// restAddr and restDone: its REST-JSON listener (Dims.REST).
	restAddr string
	restDone chan error
}

// Execute runs sched and returns what failed: a check at some response, or
// convergence once the schedule is over. dir holds warm-restart files.
func Execute(sched *Schedule, dir string, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	r := &Run{sched: sched, world: newWorld(), rng: rand.New(rand.NewPCG(sched.Seed, 2)), dir: dir, log: log,
		clients: map[string]*Client{}}
	defer r.shutdown()
	r.model = newModel(sched.Opts.World, r.rng)
	r.xrng = rand.New(rand.NewPCG(sched.Seed, 5))
	if sched.Opts.Dims.Glob {
		r.model.initGlob()
	}
	r.world.add(r.model.snapshot())
	servers := 1
	if sched.Opts.Fallback {
		servers = 2
	}
	// The run's servers listen on a loopback address of its own: an
	// upstream that goes down, or a relay that restarts, takes its port
	// again, and meanwhile a listener of another process (or of an earlier
	// run) on 127.0.0.1 could have taken it — the relays would have talked
	// to another run's upstream (found when two soaks and CI ran at once).
	host := fmt.Sprintf("127.%d.%d.%d:0", 1+rand.IntN(254), rand.IntN(256), 1+rand.IntN(254))
	for i := range servers {
		u := newUpstream(r.world, sched.Opts.Ordered, sched.Opts.Forgetful, sched.Seed+uint64(i))
		u.listForeign = sched.Opts.Dims.Foreign
		if sched.Opts.Dims.GCP {
			u.useGCP()
		}
		if err := u.start(host); err != nil {
			return err
		}
		r.ups = append(r.ups, u)
	}
	for i := range sched.Opts.Replicas {
		slot := &relaySlot{index: i, addr: host, restAddr: host}
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
	}
	return r.quiesce()
}

// step executes one step.
func (r *Run) step(st Step) error {
	client := func() *Client {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.clients[st.Client.ID]
	}
	switch st.Op {
	case OpPublish:
		var what []string
		for range st.N {
			what = append(what, r.model.mutate(r.rng))
		}
		what = append(what, r.mutateDims()...)
		r.publish()
		r.trace("published %d: %s", r.world.Len()-1, strings.Join(what, "; "))
	case OpJoin:
		c := newClient(r, st.Client)
		r.mu.Lock()
		r.clients[c.spec.ID] = c
		r.mu.Unlock()
		c.connect(st.Relay)
	case OpLeave:
		if c := client(); c != nil {
			r.mu.Lock()
			delete(r.clients, c.spec.ID)
			r.mu.Unlock()
			c.close()
		}
	case OpMove:
		if c := client(); c != nil {
			c.connect(st.Relay)
		}
	case OpSlow, OpFast:
		if c := client(); c != nil {
			c.setPause(time.Duration(st.N) * time.Millisecond)
		}
	case OpPause:
		time.Sleep(time.Duration(st.N) * time.Millisecond) // the schedule's own time passing
	case OpUpstreamDown:
		if st.Server < len(r.ups) {
			r.ups[st.Server].stop()
		}
	case OpUpstreamUp:
		if u := r.upstream(st.Server); u != nil && !u.running() {
			return u.start(u.addr)
		}
	case OpRelayRestart:
		if st.Relay < len(r.relays) {
			slot := r.relays[st.Relay]
			r.stopRelay(slot)
			return r.startRelay(slot)
		}
	default:
		r.fault(st)
	}
	return nil
}

func (r *Run) upstream(i int) *Upstream {
	if i < len(r.ups) {
		return r.ups[i]
	}
	return nil
}

// publish makes the model's state the next snapshot and pushes it.
func (r *Run) publish() {
	r.world.add(r.model.snapshot())
	for _, u := range r.ups {
		if u.running() {
			u.publish()
		}
	}
}

// quiesce ends the schedule: every server and client back to normal, a last
// snapshot without bad versions (with rollouts: a next version of every
// cluster, twice if the first is not everywhere within 2 s), and then every
// client must hold exactly the upstream's state of what it subscribes to.
func (r *Run) quiesce() error {
	for _, u := range r.ups {
		u.speak("", true)
		if !u.running() {
			if err := u.start(u.addr); err != nil {
				return err
			}
		}
	}
	for _, c := range r.clientList() {
		c.setPause(0)
	}
	next := func() {
		for _, g := range r.model.clusters {
			g.bad = false
			if r.sched.Opts.Rollout {
				// A next version of every cluster: a halted guarded rollout
				// holds back what it halted — a good version halted with a
				// bad one of the same rollout too — until the upstream's
				// next one.
				g.gen = r.model.content()
				if g.prod != 0 {
					g.prod = r.model.content()
				}
			}
		}
		if r.sched.Opts.Rollout {
			for n := range r.model.members {
				r.model.members[n] = r.model.content() // glob members too
			}
		}
		r.model.gen++
		for _, g := range r.model.clusters {
			g.eds = r.model.content() // a change everyone sees, after the rest settled
		}
		r.publish()
	}
	next()
	start := time.Now()
	again := r.sched.Opts.Rollout
	p := newProgress(start, start.Add(3*time.Minute))
	for {
		if err := r.failed(); err != nil {
			return err
		}
		var diffs []string
		snap, sampled := r.world.Current(), time.Now()
		for _, c := range r.clientList() {
			if ok, diff := c.converged(snap); !ok {
				diffs = append(diffs, diff)
			}
		}
		if len(diffs) == 0 {
			return nil
		}
		if again && time.Since(start) > 2*time.Second {
			// A bad version still on its way to a picky canary may halt the
			// rollout of the versions just published (a NACK says nothing
			// of which resource it rejects): once more, now that the bad
			// ones are out of the way.
			again = false
			r.trace("quiesce: a second round of next versions")
			next()
		}
		slices.Sort(diffs)
		if p.stalled(strings.Join(diffs, "\n  "), sampled, time.Now()) {
			return fmt.Errorf("no convergence 20 s after the schedule ended (or the clients' last progress):\n  %s\n%s", p.last, r.dump())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *Run) clientList() []*Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Client, 0, len(r.clients))
	for _, c := range r.clients {
		out = append(out, c)
	}
	return out
}

// dump describes the relays' caches and clients, for a failure message.
func (r *Run) dump() string {
	var b strings.Builder
	for _, s := range r.relays {
		s.mu.Lock()
		rl, id := s.relay, s.id
		s.mu.Unlock()
		if rl == nil {
			continue
		}
		fmt.Fprintf(&b, "relay %s cache:\n", id)
		for _, e := range rl.DebugCache(relay.CacheFilter{}) {
			fmt.Fprintf(&b, "    [%s] %s %s{%s} %s subscribers=%d\n", e.Scope, keying.ShortType(e.Type), e.Name, e.Constraints, e.Version, e.Subscribers)
		}
		fmt.Fprintf(&b, "relay %s clients:\n", id)
		for _, c := range rl.DebugClients("") {
			fmt.Fprintf(&b, "    %s %s %s:", c.NodeID, c.Protocol, c.Service)
			for t, ti := range c.Types {
				fmt.Fprintf(&b, " %s wild=%v names=%v sent=%s acked=%s;", keying.ShortType(t), ti.Wildcard, ti.Names, ti.SentVersion, ti.AckedVersion)
			}
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "relay %s upstreams:\n", id)
		for _, u := range rl.DebugUpstreams() {
			fmt.Fprintf(&b, "    %s %s %s:", u.Authority, u.Server, u.State)
			for _, ts := range u.Types {
				fmt.Fprintf(&b, " %s wild=%v names=%v v=%s;", keying.ShortType(ts.TypeURL), ts.Wildcard, ts.Names, ts.Version)
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// shutdown stops every client, relay and server.
func (r *Run) shutdown() {
	for _, c := range r.clientList() {
		c.close()
	}
	for _, s := range r.relays {
		r.stopRelay(s)
	}
	for _, u := range r.ups {
		u.speak("", true) // its timers
		u.stop()
	}
}

// trace logs what happens at Debug.
func (r *Run) trace(format string, args ...any) {
	if ce := r.log.Check(zap.DebugLevel, "oracle"); ce != nil {
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

// listenerFor is the listener a gRPC-shaped client subscribes to.
func (r *Run) listenerFor(id string) string {
	ls := r.world.Current().Names(keying.ListenerType)
	h := fnv.New32a()
	h.Write([]byte(id))
	return ls[int(h.Sum32())%len(ls)]
}

// instance is the current instance of relay slot i ("relay-A3").
func (r *Run) instance(i int) string {
	if i >= len(r.relays) {
		return ""
	}
	s := r.relays[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// windows returns the windows of instance's scopes for typeURL on every
// upstream server (see window), by server and node id.
func (r *Run) windows(instance, typeURL string) map[string]window {
	out := map[string]window{}
	for i, u := range r.ups {
		for node, w := range u.Windows(instance, typeURL) {
			out[fmt.Sprintf("%d %s", i, node)] = w
		}
	}
	return out
}

func (r *Run) relayAddr(i int) string {
	s := r.relays[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// startRelay starts the next instance of slot on its address.
func (r *Run) startRelay(s *relaySlot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.id = fmt.Sprintf("relay-%c%d", 'A'+s.index, s.gen)
	o := r.sched.Opts
	cfg := config.Default()
	cfg.Admin = ""
	cfg.Node = config.Node{ID: s.id, Cluster: "relay"}
	for _, u := range r.ups {
		cfg.Upstream.XDSServers = append(cfg.Upstream.XDSServers, config.Server{ServerURI: u.addr, Protocol: o.Protocol})
	}
	cfg.Upstream.Linger = 30 * time.Millisecond
	cfg.Upstream.UnavailableAfter = 200 * time.Millisecond
	cfg.Upstream.DoesNotExistAfter = 600 * time.Millisecond
	cfg.Cache.MaxUnreferenced = o.MaxUnreferenced
	if o.Persist {
		cfg.Cache.PersistPath = filepath.Join(r.dir, fmt.Sprintf("relay-%d.cache", s.index))
	}
	r.configDims(cfg)
	if o.GroupBy {
		cfg.Keying = &config.Keying{GroupBy: []string{"cluster"}}
	}
	if o.Rollout {
		cfg.Rollout = &config.Rollout{CanaryFraction: 0.3, Hold: 300 * time.Millisecond}
	}
	var lis net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lis, err = net.Listen("tcp", s.addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("oracle: relay listen: %w", err)
	}
	s.addr = lis.Addr().String()
	cfg.Listen = s.addr
	rl, err := relay.New(cfg, r.log.Named(s.id))
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("oracle: relay: %w", err)
	}
	s.relay, s.done = rl, make(chan error, 1)
	go func() { s.done <- rl.Serve(lis) }()
	return r.startREST(s, rl)
}

// stopRelay closes slot's relay (its warm-restart file is written).
func (r *Run) stopRelay(s *relaySlot) {
	s.mu.Lock()
	rl, done, restDone := s.relay, s.done, s.restDone
	s.relay = nil
	s.mu.Unlock()
	if rl != nil {
		rl.Close()
		<-done
		if restDone != nil {
			<-restDone
		}
	}
}
