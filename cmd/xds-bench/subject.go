package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// env is what every run shares.
type env struct {
	bin         string // directory of xds-relay, xds-democp, xds-loadgen
	logDir      string // child logs and profiles
	clusters    int
	syncTimeout time.Duration
	log         io.Writer // progress lines for the operator
}

// runConfig describes one run of a subject under load.
type runConfig struct {
	// Name labels logs and output ("baseline-sotw").
	Name string `json:"name"`
	// Relay puts xds-relay between xds-democp and the clients; otherwise the
	// clients talk to xds-democp (go-control-plane) directly.
	Relay bool `json:"relay"`
	// Protocol is sotw or delta.
	Protocol string `json:"protocol"`
	// Clients is the number of simulated Envoy-like clients (streams).
	Clients int `json:"clients"`
	// StreamsPerConn is the number of clients per gRPC connection.
	StreamsPerConn int `json:"streams_per_conn"`
	// Change makes one CDS change after all clients synced and measures it.
	Change bool `json:"change"`
	// Profile (relay runs only) takes a CPU profile of the relay during the
	// change and a heap profile after the sync, into the log directory.
	Profile bool `json:"profile"`
}

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

	// Profile runs: the profile files.
	CPUProfile  string `json:"cpu_profile,omitempty"`
	HeapProfile string `json:"heap_profile,omitempty"`
}

// servers are the processes of one run.
type servers struct {
	democp, relay *child
	democpAddr    string // xDS
	controlAddr   string // democp's control endpoint
	relayAddr     string // xDS
	adminAddr     string // relay admin
}

// serving returns the process the clients talk to.
func (s *servers) serving() *child {
	if s.relay != nil {
		return s.relay
	}
	return s.democp
}

func (s *servers) target() string {
	if s.relay != nil {
		return s.relayAddr
	}
	return s.democpAddr
}

func (s *servers) stop() {
	if s.relay != nil {
		_ = s.relay.stop(syscall.SIGTERM, 20*time.Second)
	}
	if s.democp != nil {
		_ = s.democp.stop(syscall.SIGTERM, 20*time.Second)
	}
}

// startServers starts democp, and the relay in front of it when relay is set,
// and waits until they serve.
func startServers(ctx context.Context, e env, name string, relay bool) (*servers, error) {
	s := &servers{}
	var err error
	for _, a := range []*string{&s.democpAddr, &s.controlAddr, &s.relayAddr, &s.adminAddr} {
		if *a, err = freePort(); err != nil {
			return nil, err
		}
	}
	hc := newHTTPClient()
	s.democp, err = startChild(name+"-democp", e.logDir, filepath.Join(e.bin, "xds-democp"), []string{
		"--listen", s.democpAddr, "--control", s.controlAddr, "--clusters", itoa(e.clusters), "--log-level", "warn",
	}, childIO{})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := waitHTTP(wctx, hc, "http://"+s.controlAddr+"/healthz", s.democp); err != nil {
		s.stop()
		return nil, err
	}
	if !relay {
		return s, nil
	}
	s.relay, err = startChild(name+"-relay", e.logDir, filepath.Join(e.bin, "xds-relay"), []string{
		"--listen", s.relayAddr, "--admin", s.adminAddr, "--upstream", s.democpAddr, "--log-level", "warn",
	}, childIO{})
	if err != nil {
		s.stop()
		return nil, err
	}
	if err := waitHTTP(wctx, hc, "http://"+s.adminAddr+"/readyz", s.relay); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// relayMetrics scrapes the relay's /metrics.
func relayMetrics(ctx context.Context, s *servers) (metrics, error) {
	b, err := httpGet(ctx, newHTTPClient(), "http://"+s.adminAddr+"/metrics")
	if err != nil {
		return nil, err
	}
	return parseMetrics(string(b))
}

// logf writes one progress line for the operator.
func (e env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// runSubject runs one configuration end to end: servers, clients, sync,
// optionally one change, teardown.
func runSubject(ctx context.Context, e env, rc runConfig) (*runResult, error) {
	res := &runResult{Config: rc}
	srv, err := startServers(ctx, e, rc.Name, rc.Relay)
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
		m, err := relayMetrics(ctx, srv)
		if err != nil {
			return nil, err
		}
		res.RelayHeapBefore, _ = m.sum("go_memstats_heap_inuse_bytes", nil)
	}

	lg, err := startLoadgen(rc.Name+"-loadgen", e.logDir, filepath.Join(e.bin, "xds-loadgen"), []string{
		"--target", srv.target(), "--clients", itoa(rc.Clients), "--streams-per-conn", itoa(rc.StreamsPerConn),
		"--mode", "envoy", "--protocol", rc.Protocol, "--duration", "1h",
		"--sync-timeout", e.syncTimeout.String(), "--json", "--log-level", "warn",
	})
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
	e.logf("%s: %d clients connecting to %s", rc.Name, rc.Clients, srv.target())
	sctx, cancel := context.WithTimeout(ctx, e.syncTimeout+30*time.Second)
	p, err := lg.waitFor(sctx, "all clients synced", func(p progress) bool { return p.Synced >= rc.Clients })
	cancel()
	if err != nil {
		return nil, err
	}
	e.logf("%s: all %d synced", rc.Name, p.Synced)

	// After: every client synced, the serving process and the clients are quiet again.
	after, err := quiesce(ctx, pids, 500*time.Millisecond, 30*time.Second)
	if err != nil {
		return nil, err
	}
	res.ServerRSSAfter = after[0].RSS
	res.SyncServerCPU = after[0].CPU - s0[0].CPU
	res.SyncLoadgenCPU = after[1].CPU - s0[1].CPU
	if res.DemocpConns, err = establishedConns(srv.democp.pid()); err != nil {
		return nil, err
	}
	if rc.Relay {
		d, err := sampleProc(srv.democp.pid())
		if err != nil {
			return nil, err
		}
		res.DemocpRSSAfter = d.RSS
		m, err := relayMetrics(ctx, srv)
		if err != nil {
			return nil, err
		}
		res.RelayHeapAfter, _ = m.sum("go_memstats_heap_inuse_bytes", nil)
		res.RelayStack, _ = m.sum("go_memstats_stack_inuse_bytes", nil)
		res.RelayGoroutines, _ = m.sum("go_goroutines", nil)
		res.UpstreamConnected, _ = m.sum("xds_relay_upstream_connected", nil)
		if rc.Profile {
			res.HeapProfile = filepath.Join(e.logDir, rc.Name+"-heap.pprof")
			if err := saveURL(ctx, "http://"+srv.adminAddr+"/debug/pprof/heap", res.HeapProfile); err != nil {
				return nil, err
			}
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
	// Idle rates, to take out of a window that has to run to the confirmation.
	idle0, err := sampleAll(pids)
	if err != nil {
		return err
	}
	if err := pause(ctx, time.Second); err != nil {
		return err
	}
	idle1, err := sampleAll(pids)
	if err != nil {
		return err
	}
	var m0 metrics
	if rc.Relay {
		if m0, err = relayMetrics(ctx, srv); err != nil {
			return err
		}
	}
	base, _ := lg.latest()

	profDone := make(chan error, 1)
	if rc.Profile && rc.Relay {
		res.CPUProfile = filepath.Join(e.logDir, rc.Name+"-cpu.pprof")
		go func() {
			profDone <- saveURL(ctx, "http://"+srv.adminAddr+"/debug/pprof/profile?seconds=5", res.CPUProfile)
		}()
		// Let the profiler start before the change.
		if err := pause(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	} else {
		profDone <- nil
	}

	writes := startSampler(pids[0], 10*time.Millisecond)
	c0, err := sampleAll(pids)
	if err != nil {
		writes.stop()
		return err
	}
	if _, err := httpDo(ctx, newHTTPClient(), "POST", "http://"+srv.controlAddr+"/change?type=cds&count=1"); err != nil {
		writes.stop()
		return err
	}
	e.logf("%s: one cluster changed; waiting for %d clients", rc.Name, rc.Clients)
	// The window ends when every process is quiet again (300 ms with at most
	// one clock tick each): the responses are sent, read and ACKed.
	c1, err := quiesce(ctx, pids, 300*time.Millisecond, 3*time.Minute)
	series := writes.stop()
	if err != nil {
		return err
	}
	// xds-loadgen confirms that every client has the change.
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	p, err := lg.waitFor(wctx, "every client has the change", func(p progress) bool {
		return p.Updates >= base.Updates+int64(rc.Clients)
	})
	cancel()
	if err != nil {
		return err
	}
	res.UpdatesSeen = p.Updates - base.Updates
	c2, err := quiesce(ctx, pids, 500*time.Millisecond, 30*time.Second)
	if err != nil {
		return err
	}
	idleCPU := func(i int, from, to procSample) time.Duration {
		rate := float64(idle1[i].CPU-idle0[i].CPU) / float64(idle1[i].At.Sub(idle0[i].At))
		return time.Duration(rate * float64(to.At.Sub(from.At)))
	}
	runToConfirmation := false
	for i := range pids {
		if late := c2[i].CPU - c1[i].CPU - idleCPU(i, c1[i], c2[i]); late > 3*clockTick {
			// Busy again after the quiet spell: count until the confirmation, less the idle rate.
			e.logf("%s: process %d used %v more CPU after the quiet spell; the window runs to the confirmation",
				rc.Name, pids[i], late)
			runToConfirmation = true
		}
	}
	end := c1
	if runToConfirmation {
		end = c2
	}
	res.ChangeWindow = end[0].At.Sub(c0[0].At)
	if at, ok := writtenBy(series, 0.99); ok {
		res.WrittenAll = at.Sub(c0[0].At)
	}
	cpu := func(i int) time.Duration {
		d := end[i].CPU - c0[i].CPU
		if runToConfirmation {
			d -= idleCPU(i, c0[i], end[i])
		}
		return max(d, 0)
	}
	res.ServerCPU = cpu(0)
	res.LoadgenCPU = cpu(1)
	res.ServerWrite = end[0].Wchr - c0[0].Wchr
	if rc.Relay {
		res.DemocpCPU = cpu(2)
		m1, err := relayMetrics(ctx, srv)
		if err != nil {
			return err
		}
		proto := map[string]string{"protocol": rc.Protocol}
		b0, _ := m0.sum("xds_relay_response_bytes_total", proto)
		b1, _ := m1.sum("xds_relay_response_bytes_total", proto)
		res.RelayResponseBytes = b1 - b0
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
