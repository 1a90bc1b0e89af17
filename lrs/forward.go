package lrs

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/internal/metrics"
)

// Backoff between attempts to reach an upstream.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// errMoved ends an upstream stream whose server is no longer the one the
// relay's xDS stream is on.
var errMoved = errors.New("lrs: the xDS stream moved to another server")

// forwarder keeps one StreamLoadStats to the upstream server the relay's
// xDS stream is on, and sends it the aggregate once per interval the
// upstream asked for. While no stream is up, the aggregate accumulates
// (bounded) and goes with the first report on return. At close, the
// interval in flight is flushed on the stream that is up.
type forwarder struct {
	// set at creation, read-only
	s        *Server
	d        *dest
	log      *zap.Logger
	ctx      context.Context
	cancel   context.CancelFunc
	flushing chan struct{} // closed by close: flush, then return
	done     chan struct{}

	mu sync.Mutex
	// guarded by mu
	state fwState

	// owned by the run goroutine
	unimplementedLogged bool
}

func newForwarder(s *Server, d *dest) *forwarder {
	f := &forwarder{s: s, d: d, log: s.log.Named("upstream").With(zap.String("authority", d.key.authority),
		zap.String("group", d.key.group)),
		flushing: make(chan struct{}), done: make(chan struct{}), state: fwState{State: StateConnecting}}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	go f.run()
	return f
}

// close flushes the interval in flight on the upstream stream that is up
// (waiting at most Options.FlushTimeout for the upstream to take it), then
// stops the run goroutine and waits for it. What is left — no stream was
// up, or the flush failed — is lost, and counted unforwarded.
func (f *forwarder) close() {
	close(f.flushing)
	select {
	case <-f.done:
	case <-time.After(f.s.opts.FlushTimeout):
		f.log.Warn("LRS flush did not end in time: the interval in flight may be lost",
			zap.Duration("flush_timeout", f.s.opts.FlushTimeout))
	}
	f.cancel()
	<-f.done
	f.setState(func(st *fwState) { st.State = StateClosed })
	if stats := f.d.agg.Take(time.Now(), nil); len(stats) > 0 {
		f.s.m.LRSReports.WithLabelValues(metrics.LRSUnforwarded).Inc()
	}
}

// isFlushing reports whether close asked for the final flush.
func (f *forwarder) isFlushing() bool {
	select {
	case <-f.flushing:
		return true
	default:
		return false
	}
}

// run (re)creates the upstream stream with jittered backoff. An upstream
// that does not implement LRS is asked again after RetryUnimplemented;
// meanwhile the aggregate is dropped each interval (counted).
func (f *forwarder) run() {
	defer close(f.done)
	backoff := minBackoff
	for f.ctx.Err() == nil && !f.isFlushing() {
		if len(f.d.upstreams) == 0 {
			f.setState(func(st *fwState) { st.State = StateNoUpstream })
			f.dropFor(f.ctx, -1)
			return
		}
		idx := f.pick()
		established, err := f.stream(idx)
		switch {
		case f.ctx.Err() != nil || f.isFlushing():
			return
		case status.Code(err) == codes.Unimplemented:
			if !f.unimplementedLogged {
				f.unimplementedLogged = true
				f.log.Warn("upstream does not implement LRS: load reports are not forwarded",
					zap.String("server", f.d.upstreams[idx].URI), zap.Error(err))
			}
			f.setState(func(st *fwState) { st.State, st.LastError = StateUnimplemented, err.Error() })
			f.dropFor(f.ctx, f.s.opts.RetryUnimplemented)
			continue
		case errors.Is(err, errMoved):
			backoff = minBackoff
			continue
		case established:
			backoff = minBackoff
		}
		f.log.Info("upstream LRS stream ended", zap.String("server", f.d.upstreams[idx].URI), zap.Error(err))
		f.setState(func(st *fwState) {
			st.State = StateBackoff
			if err != nil {
				st.LastError = err.Error()
			}
		})
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, maxBackoff)
		select {
		case <-f.ctx.Done():
			return
		case <-f.flushing:
			return
		case <-time.After(wait):
		}
	}
}

// pick returns the index of the server the load goes to: the one the xDS
// stream is on, else the first.
func (f *forwarder) pick() int {
	if f.s.opts.Current == nil {
		return 0
	}
	cur := f.s.opts.Current(f.d.key.authority, f.d.key.group)
	for i, u := range f.d.upstreams {
		if u.URI == cur {
			return i
		}
	}
	return 0
}

// dropFor takes and drops the aggregate each default interval for d (d < 0:
// until closed), counting each dropped report.
func (f *forwarder) dropFor(ctx context.Context, d time.Duration) {
	if d >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	t := time.NewTicker(f.s.opts.DefaultInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.flushing:
			return
		case now := <-t.C:
			if stats := f.d.agg.Take(now, nil); len(stats) > 0 {
				f.s.m.LRSReports.WithLabelValues(metrics.LRSUnforwarded).Inc()
			}
		}
	}
}

// dialOptions are those of the upstream server idx.
func (f *forwarder) dialOptions(idx int) []grpc.DialOption {
	u := f.d.upstreams[idx]
	creds := u.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}
	for _, cc := range u.CallCreds {
		opts = append(opts, grpc.WithPerRPCCredentials(cc))
	}
	return append(opts, f.s.opts.DialOptions...)
}

// stream runs one upstream stream to server idx until it fails, the relay
// closes or the xDS stream moves to another server. established reports
// whether the upstream answered.
func (f *forwarder) stream(idx int) (established bool, err error) {
	uri := f.d.upstreams[idx].URI
	f.setState(func(st *fwState) { st.State, st.Server = StateConnecting, uri })
	conn, err := grpc.NewClient(uri, f.dialOptions(idx)...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	st, err := lrsv3.NewLoadReportingServiceClient(conn).StreamLoadStats(ctx)
	if err != nil {
		return false, err
	}
	if err := st.Send(&lrsv3.LoadStatsRequest{Node: f.d.node}); err != nil {
		return false, recvErr(st, err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	answers := make(chan struct{}, 1)
	ended := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		ended <- f.receive(st, answers)
	}()
	return f.sendLoop(st, uri, answers, ended)
}

// recvErr returns the stream's status when a send failed (grpc reports it
// on Recv).
func recvErr(st lrsv3.LoadReportingService_StreamLoadStatsClient, err error) error {
	if _, rerr := st.Recv(); rerr != nil {
		return rerr
	}
	return err
}

// receive takes the upstream's answers until the stream ends, each a
// change of the settings, and tells the send loop.
func (f *forwarder) receive(st lrsv3.LoadReportingService_StreamLoadStatsClient, answers chan<- struct{}) error {
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		if ce := f.log.Check(zap.DebugLevel, "upstream LRS settings"); ce != nil {
			ce.Write(zap.Stringer("response", resp))
		}
		f.s.setSettings(f.d, resp)
		select {
		case answers <- struct{}{}:
		default:
		}
	}
}

// sendLoop sends the aggregate once per interval from the upstream's
// first answer on (an interval with no load is skipped).
func (f *forwarder) sendLoop(st lrsv3.LoadReportingService_StreamLoadStatsClient, uri string,
	answers <-chan struct{}, ended <-chan error) (bool, error) {
	established := false
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case err := <-ended:
			return established, err
		case <-answers:
			if !established {
				established = true
				f.log.Info("upstream LRS stream established", zap.String("server", uri))
				f.setState(func(st *fwState) { st.State, st.LastError = StateEstablished, "" })
			}
			timer.Reset(f.s.interval(f.d))
		case <-f.flushing:
			select { // an answer may have come with the close
			case <-answers:
				established = true
			default:
			}
			if !established { // the upstream has not said what it wants
				return false, nil
			}
			return true, f.flush(st, ended)
		case now := <-timer.C:
			if f.pickURI() != uri {
				return established, errMoved
			}
			cur := f.s.destSettings(f.d)
			if err := f.send(st, now, cur); err != nil {
				return established, <-ended
			}
			timer.Reset(cur.interval)
		}
	}
}

// send sends the aggregate of the interval ending at now, of the clusters
// cur asks for, when it has load.
func (f *forwarder) send(st lrsv3.LoadReportingService_StreamLoadStatsClient, now time.Time, cur settings) error {
	stats := f.d.agg.Take(now, cur.keep())
	if len(stats) == 0 {
		return nil
	}
	if err := st.Send(&lrsv3.LoadStatsRequest{Node: f.d.node, ClusterStats: stats}); err != nil {
		return err
	}
	f.s.m.LRSReports.WithLabelValues(metrics.LRSSent).Inc()
	f.setState(func(s *fwState) {
		s.LastReport, s.LastInterval = now, stats[0].GetLoadReportInterval().AsDuration()
		s.Reports++
	})
	return nil
}

// flush sends the interval in flight, half-closes the stream and waits for
// the upstream to end it: then it has read the report. close bounds the
// wait (it cancels the stream).
func (f *forwarder) flush(st lrsv3.LoadReportingService_StreamLoadStatsClient, ended <-chan error) error {
	if err := f.send(st, time.Now(), f.s.destSettings(f.d)); err != nil {
		return <-ended
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	f.log.Debug("flushed the interval in flight; waiting for the upstream to end the stream")
	return <-ended
}

func (f *forwarder) pickURI() string { return f.d.upstreams[f.pick()].URI }
