package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/config"
)

// listeners are the command's listeners; the optional ones are nil when
// off.
type listeners struct {
	xds, admin, probe, rest net.Listener
}

// listen opens every listener cfg asks for, or none: on an error it closes
// those it opened and names the one that failed (but the xDS listener's).
func listen(cfg *config.Config) (*listeners, error) {
	l := &listeners{}
	var err error
	if l.xds, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, err
	}
	rest := ""
	if cfg.REST != nil {
		rest = cfg.REST.Listen
	}
	for _, o := range []struct {
		name, addr string
		dst        *net.Listener
	}{{"admin", cfg.Admin, &l.admin}, {"probe", cfg.ProbeListen, &l.probe}, {"rest", rest, &l.rest}} {
		if o.addr == "" {
			continue
		}
		if *o.dst, err = net.Listen("tcp", o.addr); err != nil {
			l.close()
			return nil, fmt.Errorf("%s: %w", o.name, err)
		}
	}
	return l, nil
}

// close closes every listener.
func (l *listeners) close() {
	for _, lis := range []net.Listener{l.xds, l.admin, l.probe, l.rest} {
		if lis != nil {
			_ = lis.Close()
		}
	}
}

// addr is lis's address, "" for nil (off).
func addr(lis net.Listener) string {
	if lis == nil {
		return ""
	}
	return lis.Addr().String()
}

// httpServers are the command's HTTP servers (admin, probe). Serve's
// results, which are errors named after their server, arrive on done.
type httpServers struct {
	log  *zap.Logger
	srvs []*http.Server
	done chan error
}

func newHTTPServers(log *zap.Logger) *httpServers {
	return &httpServers{log: log, done: make(chan error, 2)}
}

// serve serves h on lis, when lis is not nil, until shutdown.
func (hs *httpServers) serve(name string, lis net.Listener, h http.Handler) {
	if lis == nil {
		return
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          zap.NewStdLog(hs.log.Named(name)),
	}
	hs.srvs = append(hs.srvs, srv)
	go func() { hs.done <- fmt.Errorf("%s: %w", name, srv.Serve(lis)) }()
}

// shutdown stops every server (the calls in progress get 500 ms, then they
// are cut) and waits until every Serve has returned; returned is how many
// results the caller has already received from done.
func (hs *httpServers) shutdown(returned int) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	for _, srv := range hs.srvs {
		if err := srv.Shutdown(ctx); err != nil {
			hs.log.Warn("http shutdown", zap.Error(err))
			_ = srv.Close()
		}
	}
	for range len(hs.srvs) - returned {
		if err := <-hs.done; !errors.Is(err, http.ErrServerClosed) {
			hs.log.Error("http", zap.Error(err))
		}
	}
}
