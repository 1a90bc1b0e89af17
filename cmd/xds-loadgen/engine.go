package main

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"

	"github.com/xds-relay/xds-relay/gateway/controlv1"
	"github.com/xds-relay/xds-relay/internal/fleet"
)

// Config configures an Engine.
type Config struct {
	// Target is the xDS server address, host:port (or any gRPC target).
	Target string
	// Clients is the number of simulated clients (at least 1).
	Clients int
	// StreamsPerConn is the number of clients sharing one gRPC connection; 0 means 1.
	StreamsPerConn int
	// Ramp is the rate at which clients start; 0 means all at once.
	Ramp fleet.Rate
	// Mode is envoy or grpc; empty means envoy.
	Mode Mode
	// Protocol is sotw or delta; empty means sotw.
	Protocol Protocol
	// LDSName is the listener a grpc-mode client asks for; empty means fleet.ListenerName(0).
	LDSName string
	// Duration is how long to run once every client synced (or the sync timeout passed).
	Duration time.Duration
	// Updates, when positive, ends the run early once every synced client has seen this many updates.
	Updates int64
	// SyncTimeout is how long each client has, from its start, to sync; 0 means 30s.
	SyncTimeout time.Duration
	// NACKRatio is the fraction of clients that NACK every response.
	NACKRatio float64
	// SlowRatio is the fraction of clients that pause SlowDelay before each read.
	SlowRatio float64
	// SlowDelay is the pause of slow clients; 0 means 250ms.
	SlowDelay time.Duration
	// StuckRatio is the fraction of clients that stop reading their stream
	// once synced and keep it open: their connection has gRPC's smallest
	// flow-control windows (64 KiB, no BDP growth), so a server's sends to
	// them block on flow control once the window is full (xDS dialect only).
	StuckRatio float64
	// NodePrefix prefixes node ids: PREFIX-0, PREFIX-1, ...; empty means "xds-loadgen".
	NodePrefix string
	// Params, when set, are xRFC TP2 dynamic parameters: client i subscribes
	// to every name as a resource locator with Params[i mod len(Params)]
	// (grpc mode only: wildcard subscriptions carry no parameters).
	Params []map[string]string
	// Node shapes the clients' nodes (cluster, locality, metadata).
	Node NodeTemplate
	// TLS, when set, connects with TLS (mTLS with a certificate).
	TLS *TLSFiles
	// AllowRemovals turns the loss check off: by default a run fails when a
	// client is told that a resource it holds is gone (see Loss), which is
	// right against xds-democp, whose resources are only ever changed. Set it
	// against a control plane that deletes resources.
	AllowRemovals bool
	// Dialect is xds or gateway (gateway.control.v1); empty means xds.
	Dialect Dialect
	// GatewayClusters: gateway client i presents the cluster
	// gw-(i mod GatewayClusters); 0 means 1.
	GatewayClusters int
	// GatewayTypes are the type URLs gateway clients subscribe to; empty
	// means every type but SecretMaterial.
	GatewayTypes []string
	// LoadReport makes each client also open a StreamLoadStats
	// (envoy.service.load_stats.v3) on its connection and report small
	// synthetic load for the clusters it holds, at the interval the server
	// gives (xDS dialect only).
	LoadReport bool
	// Logger receives per-stream events at Debug; nil means zap.NewNop().
	Logger *zap.Logger
}

// withDefaults fills zero fields and validates the result.
func (c Config) withDefaults() (Config, error) {
	if c.StreamsPerConn == 0 {
		c.StreamsPerConn = 1
	}
	if c.Mode == "" {
		c.Mode = ModeEnvoy
	}
	if c.Protocol == "" {
		c.Protocol = ProtocolSotW
	}
	if c.LDSName == "" {
		c.LDSName = fleet.ListenerName(0)
	}
	if c.SyncTimeout == 0 {
		c.SyncTimeout = 30 * time.Second
	}
	if c.SlowDelay == 0 {
		c.SlowDelay = 250 * time.Millisecond
	}
	if c.NodePrefix == "" {
		c.NodePrefix = "xds-loadgen"
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Dialect == "" {
		c.Dialect = DialectXDS
	}
	if c.GatewayClusters == 0 {
		c.GatewayClusters = 1
	}
	if len(c.GatewayTypes) == 0 {
		c.GatewayTypes = controlv1.ResourceTypes[:len(controlv1.ResourceTypes)-1] // secrets need mTLS at a relay
	}
	switch {
	case c.Dialect != DialectXDS && c.Dialect != DialectGateway:
		return c, fmt.Errorf("loadgen: dialect %q: want xds or gateway", c.Dialect)
	case c.Dialect == DialectGateway && len(c.Params) > 0:
		return c, errors.New("loadgen: params are xDS TP2 parameters; the gateway dialect has none")
	case c.GatewayClusters < 1:
		return c, fmt.Errorf("loadgen: gateway-clusters %d: want at least 1", c.GatewayClusters)
	case c.Target == "":
		return c, errors.New("loadgen: target is required")
	case c.Clients < 1:
		return c, fmt.Errorf("loadgen: clients %d: want at least 1", c.Clients)
	case c.StreamsPerConn < 1:
		return c, fmt.Errorf("loadgen: streams-per-conn %d: want at least 1", c.StreamsPerConn)
	case c.Ramp < 0:
		return c, fmt.Errorf("loadgen: ramp %v: want a non-negative rate", c.Ramp)
	case c.Mode != ModeEnvoy && c.Mode != ModeGRPC:
		return c, fmt.Errorf("loadgen: mode %q: want envoy or grpc", c.Mode)
	case len(c.Params) > 0 && c.Mode != ModeGRPC:
		return c, errors.New("loadgen: params need grpc mode (Envoy-like wildcard subscriptions carry no parameters)")
	case c.Protocol != ProtocolSotW && c.Protocol != ProtocolDelta:
		return c, fmt.Errorf("loadgen: protocol %q: want sotw or delta", c.Protocol)
	case c.Duration < 0:
		return c, fmt.Errorf("loadgen: duration %v: want non-negative", c.Duration)
	case c.Updates < 0:
		return c, fmt.Errorf("loadgen: updates %d: want non-negative", c.Updates)
	case c.SyncTimeout < 0:
		return c, fmt.Errorf("loadgen: sync-timeout %v: want positive", c.SyncTimeout)
	case !(c.NACKRatio >= 0 && c.NACKRatio <= 1):
		return c, fmt.Errorf("loadgen: nack-ratio %v: want a fraction in [0, 1]", c.NACKRatio)
	case !(c.SlowRatio >= 0 && c.SlowRatio <= 1):
		return c, fmt.Errorf("loadgen: slow %v: want a fraction in [0, 1]", c.SlowRatio)
	case c.SlowDelay < 0:
		return c, fmt.Errorf("loadgen: slow-delay %v: want non-negative", c.SlowDelay)
	case !(c.StuckRatio >= 0 && c.StuckRatio <= 1):
		return c, fmt.Errorf("loadgen: stuck %v: want a fraction in [0, 1]", c.StuckRatio)
	case c.LoadReport && c.Dialect != DialectXDS:
		return c, errors.New("loadgen: load reports are xDS LRS (the gateway dialect has none)")
	case c.StuckRatio > 0 && c.Dialect != DialectXDS:
		return c, errors.New("loadgen: stuck clients speak xDS (the gateway dialect has none)")
	}
	if err := c.Node.check(); err != nil {
		return c, err
	}
	return c, nil
}

// picked reports whether client i belongs to a fraction ratio of all clients,
// spreading the picked clients evenly (ratio 0.25 picks clients 3, 7, 11, ...).
func picked(i int, ratio float64) bool {
	return math.Floor(float64(i+1)*ratio+1e-9) > math.Floor(float64(i)*ratio+1e-9)
}

// stuckWindow is the flow-control window of a stuck client's connection:
// gRPC's smallest (grpc-go ignores smaller values).
const stuckWindow = 64 << 10

// stuckConn reports whether connection j carries a stuck client.
func (e *Engine) stuckConn(j int) bool {
	n := e.cfg.StreamsPerConn
	for i := j * n; i < min((j+1)*n, e.cfg.Clients); i++ {
		if picked(i, e.cfg.StuckRatio) {
			return true
		}
	}
	return false
}

// Engine runs one load test: it starts the clients, waits for them to sync,
// keeps them running for the configured duration and summarizes. Progress is
// safe to call concurrently with Run.
type Engine struct {
	// Set at creation, read-only.
	cfg     Config
	log     *zap.Logger
	seed    maphash.Seed
	decoded *decodeCache // safe for concurrent use

	// Updated by every client (atomics).
	ctr         counters
	prop        *histogram
	changes     *changeStats
	clientsDone atomic.Int64 // clients that have seen cfg.Updates updates

	lossMu       sync.Mutex
	lossExamples []Loss // guarded by lossMu: the first maxLossExamples

	// One-slot wake-ups for Run.
	syncCh chan struct{}
	doneCh chan struct{}
}

// NewEngine validates cfg and returns an Engine.
func NewEngine(cfg Config) (*Engine, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Engine{
		cfg:  cfg,
		log:  cfg.Logger,
		seed: maphash.MakeSeed(),
		// Two generations of 64k resources: a fleet's working set, plus churn.
		decoded: newDecodeCache(1 << 16),
		syncCh:  make(chan struct{}, 1),
		doneCh:  make(chan struct{}, 1),
		prop:    newHistogram(),
		changes: newChangeStats(),
	}, nil
}

// Loss is a resource a client held and that the server then said does not
// exist: a Delta removal (removed_resources, removed_resource_names), an
// omission from a SotW LDS or CDS response (full state: missing means
// deleted), or a TP3 NOT_FOUND error. xds-democp never deletes a resource
// (its set is fixed for the run, its churn changes resources), so against it,
// or a relay in front of it, every loss is a lie of the server — the kind of
// transition where caches tell clients their listeners are gone. Names the
// client stopped subscribing to itself are not losses.
type Loss struct {
	Client string `json:"client"`
	Type   string `json:"type"`
	Name   string `json:"name"`
	How    string `json:"how"`
}

// maxLossExamples bounds the losses the summary lists.
const maxLossExamples = 10

func (e *Engine) recordLoss(l Loss) {
	e.ctr.losses.Add(1)
	e.log.Warn("loss: a resource the client held was removed", zap.String("client", l.Client),
		zap.String("type", l.Type), zap.String("name", l.Name), zap.String("how", l.How))
	e.lossMu.Lock()
	if len(e.lossExamples) < maxLossExamples {
		e.lossExamples = append(e.lossExamples, l)
	}
	e.lossMu.Unlock()
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Progress returns a live snapshot.
func (e *Engine) Progress() Progress {
	return Progress{
		Clients:   e.cfg.Clients,
		Launched:  e.ctr.launched.Load(),
		Connected: e.ctr.connected.Load(),
		Synced:    e.ctr.synced.Load(),
		Updates:   e.ctr.updates.Load(),
		Errors:    e.ctr.connectErrors.Load() + e.ctr.streamErrors.Load(),
		P50:       e.prop.Quantile(0.50),
		P99:       e.prop.Quantile(0.99),
	}
}

// bytesCounter is a gRPC stats handler counting received payload bytes.
type bytesCounter struct{ n *atomic.Int64 }

func (b bytesCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (b bytesCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	if p, ok := s.(*stats.InPayload); ok {
		b.n.Add(int64(p.WireLength))
	}
}
func (b bytesCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (b bytesCounter) HandleConn(context.Context, stats.ConnStats)                       {}

// Run runs the load test until it ends or ctx is done, and returns the summary.
// It returns an error only when the clients could not be set up. Run may be called once.
func (e *Engine) Run(ctx context.Context) (*Summary, error) {
	cfg := e.cfg
	start := time.Now()
	nconns := (cfg.Clients + cfg.StreamsPerConn - 1) / cfg.StreamsPerConn
	conns, err := e.dial(nconns)
	defer func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	}()
	if err != nil {
		return nil, err
	}

	clientCtx, stopClients := context.WithCancel(ctx)
	defer stopClients()
	var wg sync.WaitGroup
	e.log.Info("starting clients", zap.String("target", cfg.Target), zap.Int("clients", cfg.Clients),
		zap.Int("connections", nconns), zap.String("dialect", string(cfg.Dialect)), zap.String("mode", string(cfg.Mode)),
		zap.String("protocol", string(cfg.Protocol)))
	clients := e.startClients(ctx, clientCtx, &wg, conns, start)
	e.awaitSync(ctx)
	e.hold(ctx)
	stopClients()
	wg.Wait()
	end := time.Now()
	return e.summarize(start, end, nconns, clients), nil
}

// dial opens nconns connections to the target. On error it also returns the
// connections already open, for the caller to close.
func (e *Engine) dial(nconns int) ([]*grpc.ClientConn, error) {
	cfg := e.cfg
	conns := make([]*grpc.ClientConn, 0, nconns)
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		var err error
		if creds, err = cfg.TLS.credentials(); err != nil {
			return conns, err
		}
	}
	for j := range nconns {
		opts := []grpc.DialOption{
			grpc.WithTransportCredentials(creds),
			grpc.WithStatsHandler(bytesCounter{n: &e.ctr.bytes}),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)),
			// Many connections: keep per-connection buffers small.
			grpc.WithSharedWriteBuffer(true),
			grpc.WithReadBufferSize(16 << 10),
			grpc.WithWriteBufferSize(16 << 10),
		}
		if e.stuckConn(j) {
			// Fixed windows (setting them turns BDP estimation off): what a
			// stuck stream does not read stays within 64 KiB, then the
			// server's sends block.
			opts = append(opts, grpc.WithInitialWindowSize(stuckWindow), grpc.WithInitialConnWindowSize(stuckWindow))
		}
		cc, err := grpc.NewClient(cfg.Target, opts...)
		if err != nil {
			return conns, fmt.Errorf("loadgen: dial %s: %w", cfg.Target, err)
		}
		conns = append(conns, cc)
	}
	return conns, nil
}

// startClients launches the clients on conns, at the ramp's rate from start
// (until ctx is done) or all at once; they run until clientCtx is done.
func (e *Engine) startClients(ctx, clientCtx context.Context, wg *sync.WaitGroup, conns []*grpc.ClientConn,
	start time.Time) []*client {
	cfg := e.cfg
	clients := make([]*client, 0, cfg.Clients)
	if iv := cfg.Ramp.Interval(); iv > 0 {
		t := time.NewTimer(0)
		next := start
	ramp:
		for i := range cfg.Clients {
			t.Reset(time.Until(next))
			select {
			case <-ctx.Done():
				t.Stop()
				break ramp
			case <-t.C:
			}
			clients = append(clients, e.launch(clientCtx, wg, conns, i))
			next = next.Add(iv)
		}
	} else {
		for i := range cfg.Clients {
			clients = append(clients, e.launch(clientCtx, wg, conns, i))
		}
	}
	return clients
}

// launch starts client i on its connection, running until ctx is done.
func (e *Engine) launch(ctx context.Context, wg *sync.WaitGroup, conns []*grpc.ClientConn, i int) *client {
	cfg := e.cfg
	c := &client{
		e:     e,
		id:    i,
		conn:  conns[i/cfg.StreamsPerConn],
		nack:  picked(i, cfg.NACKRatio),
		slow:  picked(i, cfg.SlowRatio),
		stuck: picked(i, cfg.StuckRatio),
		st:    newClientState(cfg.Mode, cfg.LDSName),
	}
	if len(cfg.Params) > 0 {
		c.params = cfg.Params[i%len(cfg.Params)]
	}
	c.node = newNode(cfg, i)
	c.startedAt = time.Now()
	e.ctr.launched.Add(1)
	wg.Go(func() { c.run(ctx) })
	if cfg.LoadReport {
		wg.Go(func() { c.runLRS(ctx) })
	}
	return c
}

// awaitSync is the sync phase: until every client synced or the last one's
// sync timeout passed.
func (e *Engine) awaitSync(ctx context.Context) {
	syncTimer := time.NewTimer(e.cfg.SyncTimeout)
	defer syncTimer.Stop()
	for e.ctr.synced.Load() < int64(e.cfg.Clients) {
		select {
		case <-ctx.Done():
			return
		case <-syncTimer.C:
			return
		case <-e.syncCh:
		}
	}
}

// hold is the run phase: once some client synced, the clients keep running
// for the configured duration, or until every synced client has seen
// cfg.Updates updates.
func (e *Engine) hold(ctx context.Context) {
	cfg := e.cfg
	if ctx.Err() != nil || e.ctr.synced.Load() <= 0 {
		return
	}
	runTimer := time.NewTimer(cfg.Duration)
	defer runTimer.Stop()
	for {
		if cfg.Updates > 0 && e.clientsDone.Load() >= e.ctr.synced.Load() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-runTimer.C:
			return
		case <-e.doneCh:
		}
	}
}

// summarize sums up a run from start to end; every client goroutine has
// returned.
func (e *Engine) summarize(start, end time.Time, nconns int, clients []*client) *Summary {
	cfg := e.cfg
	e.lossMu.Lock()
	examples := e.lossExamples
	e.lossMu.Unlock()
	run := end.Sub(start).Seconds()
	mode := cfg.Mode
	if cfg.Dialect == DialectGateway {
		mode = Mode(DialectGateway)
	}
	s := &Summary{
		Config:        runConfig(cfg),
		StartedAt:     start.UTC(),
		EndedAt:       end.UTC(),
		Target:        cfg.Target,
		Mode:          mode,
		Protocol:      cfg.Protocol,
		Clients:       cfg.Clients,
		Connections:   nconns,
		ConnectErrors: e.ctr.connectErrors.Load(),
		StreamErrors:  e.ctr.streamErrors.Load(),
		Responses:     e.ctr.responses.Load(),
		Updates:       e.ctr.updates.Load(),
		NACKs:         e.ctr.nacks.Load(),
		BytesReceived: e.ctr.bytes.Load(),
		Propagation:   latencies(e.prop),
		Changes:       e.changes.Latencies(),
		RunMS:         ms(end.Sub(start)),
		Losses:        e.ctr.losses.Load(),
		LossExamples:  examples,
		LoadReports:   e.ctr.lrsReports.Load(),
		LRSErrors:     e.ctr.lrsErrors.Load(),
		Rates: Rates{
			ResponsesPerSecond: float64(e.ctr.responses.Load()) / run,
			UpdatesPerSecond:   float64(e.ctr.updates.Load()) / run,
			BytesPerSecond:     float64(e.ctr.bytes.Load()) / run,
		},
	}
	e.tallySync(s, clients, start)
	return s
}

// tallySync counts the clients that synced within their sync timeout and,
// when all did, the time it took the last.
func (e *Engine) tallySync(s *Summary, clients []*client, start time.Time) {
	var lastSync time.Time
	for _, c := range clients { // safe: every client goroutine has returned
		if !c.syncedAt.IsZero() && c.syncedAt.Sub(c.startedAt) <= e.cfg.SyncTimeout {
			s.Synced++
			if c.syncedAt.After(lastSync) {
				lastSync = c.syncedAt
			}
		}
	}
	s.Failed = s.Clients - s.Synced
	if s.Failed == 0 {
		t := ms(lastSync.Sub(start))
		s.TimeToSyncAllMS = &t
	}
}
