package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xds-relay/xds-relay/internal/fleet"
)

// Latency probes: while a change fans out to every client, what does a new
// client wait for its first response, and an operator for the admin page?
// Each prober repeats its probe one at a time, a short gap apart, from just
// before the change until xds-loadgen reports that every client has it, and
// keeps every latency.

// probeGap is the pause between two probes of one prober.
const probeGap = 10 * time.Millisecond

// probeTimeout bounds one probe; a probe that takes longer is an error.
const probeTimeout = 10 * time.Second

// probeStats is the latency histogram of one kind of probe. Durations are
// in nanoseconds in JSON.
type probeStats struct {
	Name   string        `json:"name"`
	Count  int           `json:"count"`
	Errors int           `json:"errors"`
	P50    time.Duration `json:"p50"`
	P90    time.Duration `json:"p90"`
	P99    time.Duration `json:"p99"`
	Max    time.Duration `json:"max"`
	// LastError is the last probe's error, if any failed.
	LastError string `json:"last_error,omitempty"`
}

// prober repeats a probe until stopped.
type prober struct {
	// Set at creation, read-only.
	name  string
	stopc chan struct{}
	done  chan struct{}

	// Owned by the probing goroutine until done is closed.
	samples []time.Duration
	errs    int
	lastErr error
}

// startProber runs probe one at a time, probeGap apart, until stop.
func startProber(ctx context.Context, name string, probe func(context.Context) error) *prober {
	p := &prober{name: name, stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			t0 := time.Now()
			err := probe(pctx)
			took := time.Since(t0)
			cancel()
			if err != nil {
				p.errs++
				p.lastErr = err
			} else {
				p.samples = append(p.samples, took)
			}
			select {
			case <-ctx.Done():
				return
			case <-p.stopc:
				return
			case <-time.After(probeGap):
			}
		}
	}()
	return p
}

// stop ends the probing (after the probe in progress) and returns its histogram.
func (p *prober) stop() probeStats {
	close(p.stopc)
	<-p.done
	st := summarize(p.name, p.samples)
	st.Errors = p.errs
	if p.lastErr != nil {
		st.LastError = p.lastErr.Error()
	}
	return st
}

// summarize returns the count and the nearest-rank percentiles of samples.
func summarize(name string, samples []time.Duration) probeStats {
	s := slices.Clone(samples)
	slices.Sort(s)
	q := func(f float64) time.Duration {
		if len(s) == 0 {
			return 0
		}
		rank := int(float64(len(s))*f + 0.999999)
		return s[min(max(rank, 1), len(s))-1]
	}
	return probeStats{Name: name, Count: len(s), P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: q(1)}
}

// fanoutProbes are the probers of one fan-out.
type fanoutProbes struct {
	done  chan struct{} // closed once the probers stopped
	stats []probeStats  // written before done is closed
}

// probeFanout probes r from now until lg reports want updates (every client
// has the change) or ctx is done.
func probeFanout(ctx context.Context, r *relayProc, lg *loadgen, want int64) *fanoutProbes {
	f := &fanoutProbes{done: make(chan struct{})}
	probers := startProbes(ctx, r)
	go func() {
		defer close(f.done)
		_, _ = lg.waitFor(ctx, "every client has the change", func(p progress) bool { return p.Updates >= want })
		for _, p := range probers {
			f.stats = append(f.stats, p.stop())
		}
	}()
	return f
}

// wait returns the probes' histograms once they stopped.
func (f *fanoutProbes) wait() []probeStats {
	<-f.done
	return f.stats
}

// probeIdle probes r for d and returns the histograms.
func probeIdle(ctx context.Context, r *relayProc, d time.Duration) ([]probeStats, error) {
	probers := startProbes(ctx, r)
	err := pause(ctx, d)
	var stats []probeStats
	for _, p := range probers {
		stats = append(stats, p.stop())
	}
	return stats, err
}

// startProbes starts the probers of a relay: a new client's first response
// (a fresh connection and ADS stream subscribing to every cluster, as an
// Envoy starts), and GET /debug/upstreams and /readyz on its admin address.
func startProbes(ctx context.Context, r *relayProc) []*prober {
	hc := newHTTPClient()
	get := func(path string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := httpGet(ctx, hc, "http://"+r.admin+path)
			return err
		}
	}
	n := 0 // owned by the new-client prober's goroutine
	newClient := func(ctx context.Context) error {
		n++
		return firstResponse(ctx, r.addr, fmt.Sprintf("xds-bench-probe-%d", n))
	}
	return []*prober{
		startProber(ctx, "new client: connect, subscribe → first CDS response", newClient),
		startProber(ctx, "admin: GET /debug/upstreams", get("/debug/upstreams")),
		startProber(ctx, "admin: GET /readyz", get("/readyz")),
	}
}

// firstResponse connects to addr as a new client with node id, subscribes
// to every cluster over ADS (SotW) and waits for the first response.
func firstResponse(ctx context.Context, addr, id string) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("bench: probe: dial %s: %w", addr, err)
	}
	defer func() { _ = cc.Close() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return fmt.Errorf("bench: probe: open stream: %w", err)
	}
	err = st.Send(&discoveryv3.DiscoveryRequest{
		Node:    &corev3.Node{Id: id, Cluster: "xds-bench-probe"},
		TypeUrl: fleet.Clusters.TypeURL(),
	})
	if err != nil {
		return fmt.Errorf("bench: probe: send: %w", err)
	}
	resp, err := st.Recv()
	if err != nil {
		return fmt.Errorf("bench: probe: receive: %w", err)
	}
	if len(resp.GetResources()) == 0 {
		return fmt.Errorf("bench: probe: first response (version %q) has no clusters", resp.GetVersionInfo())
	}
	return nil
}
