package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

// env is what every run shares.
type env struct {
	bin         string // directory of xds-relay, xds-democp, xds-loadgen
	self        string // this program, for its hidden commands (grpc-floor)
	logDir      string // child logs and profiles
	clusters    int
	syncTimeout time.Duration
	log         io.Writer // progress lines for the operator
	relayEnv    []string  // added to each relay's environment (--relay-gomemlimit)
}

// runConfig describes one run of a subject under load.
type runConfig struct {
	// Name labels logs and output ("baseline-sotw").
	Name string `json:"name"`
	// Relay puts xds-relay between xds-democp and the clients; otherwise the
	// clients talk to xds-democp (go-control-plane) directly.
	Relay bool `json:"relay"`
	// Floor has the clients talk to the gRPC floor (floor.go) instead of
	// xds-democp; not with Relay.
	Floor bool `json:"floor,omitempty"`
	// Protocol is sotw or delta.
	Protocol string `json:"protocol"`
	// Mode is the clients' shape: envoy (wildcard LDS/CDS, then RDS/EDS) or
	// grpc (proxyless gRPC: LDS → RDS → CDS → EDS, every name by name).
	Mode string `json:"mode"`
	// Clients is the number of simulated clients (streams).
	Clients int `json:"clients"`
	// StreamsPerConn is the number of clients per gRPC connection.
	StreamsPerConn int `json:"streams_per_conn"`
	// Change makes one CDS change after all clients synced and measures it.
	Change bool `json:"change"`
	// Profile (relay runs only) takes a CPU profile of the relay during the
	// change and a heap profile after the sync, into the log directory.
	Profile bool `json:"profile"`
	// Probe (relay runs only) measures a new client's first response and
	// admin requests while the change fans out (see probe.go).
	Probe bool `json:"probe"`
}

// The client modes of xds-loadgen.
const (
	modeEnvoy = "envoy"
	modeGRPC  = "grpc"
)

// runResult is what one run measured. Durations are in nanoseconds in JSON.
type runResult struct {
	Config  runConfig       `json:"config"`
	Loadgen *loadgenSummary `json:"loadgen"`

	// Memory of the serving process (the relay, or democp for the baseline):
	// before any client connected, and once all synced and the process was quiet.
	ServerRSSBefore uint64 `json:"server_rss_before"`
	ServerRSSAfter  uint64 `json:"server_rss_after"`
	// Relay runs: democp's RSS, and the relay's Go runtime figures from /metrics.
	DemocpRSSAfter  uint64  `json:"democp_rss_after,omitempty"`
	RelayHeapBefore float64 `json:"relay_heap_before,omitempty"` // go_memstats_heap_inuse_bytes
	RelayHeapAfter  float64 `json:"relay_heap_after,omitempty"`
	RelayStack      float64 `json:"relay_stack,omitempty"` // go_memstats_stack_inuse_bytes
	RelayGoroutines float64 `json:"relay_goroutines,omitempty"`
	// UpstreamConnected is the relay's xds_relay_upstream_connected (summed).
	UpstreamConnected float64 `json:"upstream_connected,omitempty"`
	// DemocpConns counts democp's established TCP connections once all synced.
	DemocpConns int `json:"democp_conns"`
	// CPU spent syncing the clients: from the start of xds-loadgen until all
	// synced and quiet, by the serving process and by xds-loadgen.
	SyncServerCPU  time.Duration `json:"sync_server_cpu"`
	SyncLoadgenCPU time.Duration `json:"sync_loadgen_cpu"`

	// The change window: from the change request until the serving processes
	// and the clients were quiet again.
	ChangeWindow time.Duration `json:"change_window,omitempty"`
	// WrittenAll is from the change request until the serving process had
	// written 99 % of the window's bytes: the server-side fan-out time.
	WrittenAll time.Duration `json:"written_all,omitempty"`
	// CPU over the window (less the idle rate when the window had to run to
	// the confirmation), of the serving process, democp (relay runs) and xds-loadgen.
	ServerCPU  time.Duration `json:"server_cpu,omitempty"`
	DemocpCPU  time.Duration `json:"democp_cpu,omitempty"`
	LoadgenCPU time.Duration `json:"loadgen_cpu,omitempty"`
	// Bytes the serving process wrote (wchar: socket writes) over the window.
	ServerWrite uint64 `json:"server_write,omitempty"`
	// Relay runs: growth of xds_relay_response_bytes_total for the run's protocol.
	RelayResponseBytes float64 `json:"relay_response_bytes,omitempty"`
	// UpdatesSeen is how many clients reported the change.
	UpdatesSeen int64 `json:"updates_seen,omitempty"`
	// Created is the change's creation stamp; Change its propagation to the
	// clients (xds-loadgen's latencies of that stamp).
	Created int64      `json:"created_unix_nano,omitempty"`
	Change  *latencies `json:"change,omitempty"`
	// Relay runs: growth of xds_relay_responses_total for the run's protocol
	// over the window (one per client when nothing is sent twice).
	RelayResponses float64 `json:"relay_responses,omitempty"`
	// Probe runs: latencies of the probes during the fan-out, and of the
	// same probes for a second before the change, with nothing going on.
	Probes     []probeStats `json:"probes,omitempty"`
	IdleProbes []probeStats `json:"idle_probes,omitempty"`

	// Profile runs: the profile files.
	CPUProfile  string `json:"cpu_profile,omitempty"`
	HeapProfile string `json:"heap_profile,omitempty"`
}

// servers are the processes of one run.
type servers struct {
	democp      *child     // nil in a floor run
	floor       *child     // the gRPC floor, in place of democp (floor.go)
	relay       *relayProc // nil: the clients talk to democp or the floor
	democpAddr  string     // xDS of democp or the floor
	controlAddr string     // the control endpoint of democp or the floor
}

// relayProc is one running xds-relay.
type relayProc struct {
	c     *child
	addr  string // xDS
	admin string // admin HTTP
}

// serving returns the process the clients talk to.
func (s *servers) serving() *child {
	switch {
	case s.relay != nil:
		return s.relay.c
	case s.floor != nil:
		return s.floor
	}
	return s.democp
}

func (s *servers) target() string {
	if s.relay != nil {
		return s.relay.addr
	}
	return s.democpAddr
}

func (s *servers) stop() {
	if s.relay != nil {
		s.relay.stop()
	}
	for _, c := range []*child{s.democp, s.floor} {
		if c != nil {
			_ = c.stop(syscall.SIGTERM, 20*time.Second)
		}
	}
}

func (r *relayProc) stop() { _ = r.c.stop(syscall.SIGTERM, 20*time.Second) }

// startServers starts democp (with proxyless-gRPC listeners for grpc-mode
// clients, and democpArgs), and the relay in front of it when relay is set,
// and waits until they serve.
func startServers(ctx context.Context, e env, name string, relay bool, mode string, democpArgs ...string) (*servers, error) {
	s := &servers{}
	style := string(fleet.StyleEnvoy)
	if mode == modeGRPC {
		style = string(fleet.StyleGRPC)
	}
	err := withFreePorts(2, func(a []string) error {
		s.democpAddr, s.controlAddr = a[0], a[1]
		// One route configuration: it routes to every cluster, so that a
		// grpc-mode client watches all of them and their endpoints by name.
		var err error
		s.democp, err = startChild(name+"-democp", e.logDir, filepath.Join(e.bin, "xds-democp"), append([]string{
			"--listen", s.democpAddr, "--control", s.controlAddr, "--clusters", itoa(e.clusters), "--routes", "1",
			"--style", style, "--log-level", "warn",
		}, democpArgs...), childIO{})
		if err != nil {
			return err
		}
		return s.waitServing(ctx, s.democp)
	})
	if err != nil {
		return nil, err
	}
	if !relay {
		return s, nil
	}
	if s.relay, err = startRelay(ctx, e, name+"-relay", s.democpAddr); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// waitServing waits until c, democp or the floor, answers on the control
// address; it stops the servers when c does not.
func (s *servers) waitServing(ctx context.Context, c *child) error {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := waitHTTP(wctx, newHTTPClient(), "http://"+s.controlAddr+"/healthz", c); err != nil {
		s.stop()
		return err
	}
	return nil
}

// democpConns counts democp's established TCP connections (none in a floor run).
func (s *servers) democpConns() (int, error) {
	if s.democp == nil {
		return 0, nil
	}
	return establishedConns(s.democp.pid())
}

// startSubject starts the servers of rc: the floor, or democp and the relay.
func startSubject(ctx context.Context, e env, rc runConfig) (*servers, error) {
	if rc.Floor {
		return startFloor(ctx, e, rc.Name, rc.Mode)
	}
	return startServers(ctx, e, rc.Name, rc.Relay, rc.Mode)
}

// startFloor starts the gRPC floor (floor.go) serving the fleet of mode and
// waits until it serves.
func startFloor(ctx context.Context, e env, name, mode string) (*servers, error) {
	s := &servers{}
	style := string(fleet.StyleEnvoy)
	if mode == modeGRPC {
		style = string(fleet.StyleGRPC)
	}
	err := withFreePorts(2, func(a []string) error {
		s.democpAddr, s.controlAddr = a[0], a[1]
		var err error
		s.floor, err = startChild(name, e.logDir, e.self, []string{floorCommand, "--listen", s.democpAddr,
			"--control", s.controlAddr, "--clusters", itoa(e.clusters), "--style", style}, childIO{})
		if err != nil {
			return err
		}
		return s.waitServing(ctx, s.floor)
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// startRelay starts an xds-relay in front of upstream and waits until it is
// ready.
func startRelay(ctx context.Context, e env, name, upstream string) (*relayProc, error) {
	r := &relayProc{}
	err := withFreePorts(2, func(a []string) error {
		r.addr, r.admin = a[0], a[1]
		var err error
		r.c, err = startChild(name, e.logDir, filepath.Join(e.bin, "xds-relay"), []string{
			"--listen", r.addr, "--admin", r.admin, "--upstream", upstream, "--log-level", "warn",
		}, childIO{Env: e.relayEnv})
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := waitHTTP(wctx, newHTTPClient(), "http://"+r.admin+"/readyz", r.c); err != nil {
			r.stop()
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// metrics scrapes the relay's /metrics.
func (r *relayProc) metrics(ctx context.Context) (metrics, error) {
	b, err := httpGet(ctx, newHTTPClient(), "http://"+r.admin+"/metrics")
	if err != nil {
		return nil, err
	}
	return parseMetrics(string(b))
}

// logf writes one progress line for the operator.
func (e env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// startClients starts xds-loadgen with clients simulated clients of mode
// (envoy or grpc) and protocol against target, and extra flags.
func startClients(e env, name, target string, clients, streamsPerConn int, mode, protocol string,
	extra ...string) (*loadgen, error) {
	args := append([]string{
		"--target", target, "--clients", itoa(clients), "--streams-per-conn", itoa(streamsPerConn),
		"--mode", mode, "--protocol", protocol, "--duration", "1h",
		"--sync-timeout", e.syncTimeout.String(), "--json", "--log-level", "warn",
		"--progress-every", progressEvery.String(),
	}, extra...)
	return startLoadgen(name, e.logDir, filepath.Join(e.bin, "xds-loadgen"), args)
}

// progressEvery is the interval of xds-loadgen's progress lines, which the
// bench waits on.
const progressEvery = 500 * time.Millisecond

// waitSynced waits until every client of lg has synced.
func waitSynced(ctx context.Context, e env, name string, lg *loadgen, clients int) error {
	sctx, cancel := context.WithTimeout(ctx, e.syncTimeout+30*time.Second)
	defer cancel()
	p, err := lg.waitFor(sctx, "all clients synced", func(p progress) bool { return p.Synced >= clients })
	if err != nil {
		return err
	}
	e.logf("%s: all %d synced", name, p.Synced)
	return nil
}

// runSubject runs one configuration end to end: servers, clients, sync,
// optionally one change, teardown.
func runSubject(ctx context.Context, e env, rc runConfig) (*runResult, error) {
	res := &runResult{Config: rc}
	srv, err := startSubject(ctx, e, rc)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	serving := srv.serving()

	// Before: the servers are up and idle, no client yet.
	before, err := quiesce(ctx, []int{serving.pid()}, 300*time.Millisecond, 5*time.Second)
	if err != nil {
		return nil, err
	}
	res.ServerRSSBefore = before[0].RSS
	if rc.Relay {
		m, err := srv.relay.metrics(ctx)
		if err != nil {
			return nil, err
		}
		res.RelayHeapBefore, _ = m.sum("go_memstats_heap_inuse_bytes", nil)
	}

	lg, err := startClients(e, rc.Name+"-loadgen", srv.target(), rc.Clients, rc.StreamsPerConn, rc.Mode, rc.Protocol)
	if err != nil {
		return nil, err
	}
	finished := false
	defer func() {
		if !finished {
			lg.stopQuietly()
		}
	}()
	pids := []int{serving.pid(), lg.c.pid()}
	s0 := []procSample{before[0], {}} // xds-loadgen starts at zero
	e.logf("%s: %d %s-mode clients connecting to %s", rc.Name, rc.Clients, rc.Mode, srv.target())
	if err := waitSynced(ctx, e, rc.Name, lg, rc.Clients); err != nil {
		return nil, err
	}

	// After: every client synced, the serving process and the clients are quiet again.
	after, err := quiesce(ctx, pids, 500*time.Millisecond, 30*time.Second)
	if err != nil {
		return nil, err
	}
	res.ServerRSSAfter = after[0].RSS
	res.SyncServerCPU = after[0].CPU - s0[0].CPU
	res.SyncLoadgenCPU = after[1].CPU - s0[1].CPU
	if res.DemocpConns, err = srv.democpConns(); err != nil {
		return nil, err
	}
	if rc.Relay {
		d, err := sampleProc(srv.democp.pid())
		if err != nil {
			return nil, err
		}
		res.DemocpRSSAfter = d.RSS
		m, err := srv.relay.metrics(ctx)
		if err != nil {
			return nil, err
		}
		res.RelayHeapAfter, _ = m.sum("go_memstats_heap_inuse_bytes", nil)
		res.RelayStack, _ = m.sum("go_memstats_stack_inuse_bytes", nil)
		res.RelayGoroutines, _ = m.sum("go_goroutines", nil)
		res.UpstreamConnected, _ = m.sum("xds_relay_upstream_connected", nil)
		if rc.Profile {
			res.HeapProfile = filepath.Join(e.logDir, rc.Name+"-heap.pprof")
			if err := saveURL(ctx, "http://"+srv.relay.admin+"/debug/pprof/heap", res.HeapProfile); err != nil {
				return nil, err
			}
		}
	}

	if rc.Probe && rc.Relay {
		// The same probes with nothing going on, for comparison.
		if res.IdleProbes, err = probeIdle(ctx, srv.relay, time.Second); err != nil {
			return nil, err
		}
		if _, err := quiesce(ctx, pids, 300*time.Millisecond, 30*time.Second); err != nil {
			return nil, err
		}
	}
	if rc.Change {
		if err := measureChange(ctx, e, rc, srv, lg, res); err != nil {
			return nil, err
		}
	}

	finished = true
	if res.Loadgen, err = lg.finish(2 * time.Minute); err != nil {
		return nil, err
	}
	if rc.Change {
		if l, ok := res.Loadgen.change(res.Created); ok {
			res.Change = &l
		}
	}
	e.logf("%s: done", rc.Name)
	return res, nil
}

// measureChange makes one CDS change and measures the processes until every
// client has it and they are quiet again.
func measureChange(ctx context.Context, e env, rc runConfig, srv *servers, lg *loadgen, res *runResult) error {
	// Processes by index: the serving process, xds-loadgen, and democp behind a relay.
	pids := []int{srv.serving().pid(), lg.c.pid()}
	if rc.Relay {
		pids = append(pids, srv.democp.pid())
	}
	var m0 metrics
	profDone := make(chan error, 1)
	pctx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	var probes *fanoutProbes
	before := func() error {
		if !rc.Relay {
			profDone <- nil
			return nil
		}
		var err error
		if m0, err = srv.relay.metrics(ctx); err != nil {
			return err
		}
		if rc.Probe {
			base, _ := lg.latest() // a line since the processes went quiet
			probes = probeFanout(pctx, srv.relay, lg, base.Updates+int64(rc.Clients))
		}
		if !rc.Profile {
			profDone <- nil
			return nil
		}
		res.CPUProfile = filepath.Join(e.logDir, rc.Name+"-cpu.pprof")
		go func() {
			profDone <- saveURL(ctx, "http://"+srv.relay.admin+"/debug/pprof/profile?seconds=5", res.CPUProfile)
		}()
		// Let the profiler start before the change.
		return pause(ctx, 200*time.Millisecond)
	}
	w, err := measureWindow(ctx, e, windowSpec{name: rc.Name, controlAddr: srv.controlAddr, pids: pids,
		expect: []expect{{lg, rc.Clients}}, confirmWithin: 3 * time.Minute, beforeChange: before})
	if probes != nil {
		stopProbes() // on errors; otherwise every client has the change and the probes have stopped
		res.Probes = probes.wait()
	}
	if err != nil {
		return err
	}
	if w.Missing > 0 {
		return fmt.Errorf("bench: %d of %d clients did not report the change within 3m", w.Missing, rc.Clients)
	}
	res.Created = w.Created
	res.UpdatesSeen = w.Updates
	res.ChangeWindow = w.Length
	res.WrittenAll = w.WrittenAll
	res.ServerCPU, res.LoadgenCPU = w.CPU[0], w.CPU[1]
	res.ServerWrite = w.Write
	if rc.Relay {
		res.DemocpCPU = w.CPU[2]
		m1, err := srv.relay.metrics(ctx)
		if err != nil {
			return err
		}
		proto := map[string]string{"protocol": rc.Protocol}
		b0, _ := m0.sum("xds_relay_response_bytes_total", proto)
		b1, _ := m1.sum("xds_relay_response_bytes_total", proto)
		res.RelayResponseBytes = b1 - b0
		r0, _ := m0.sum("xds_relay_responses_total", proto)
		r1, _ := m1.sum("xds_relay_responses_total", proto)
		res.RelayResponses = r1 - r0
	}
	return <-profDone
}

// pause waits d or until ctx is done. It is a measurement interval, not a
// synchronisation.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("bench: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}

// saveURL writes the body of url to path.
func saveURL(ctx context.Context, url, path string) error {
	b, err := httpGet(ctx, newHTTPClient(), url)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}
